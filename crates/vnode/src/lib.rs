//! vnode layer
