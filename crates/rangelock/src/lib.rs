//! Byte-range reader/writer locks (being built).
