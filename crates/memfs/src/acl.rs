//! POSIX ACLs: the `system.posix_acl_access` and `system.posix_acl_default`
//! extended attributes, with tmpfs's semantics.
//!
//! With `FUSE_POSIX_ACL` the kernel enforces ACLs in its permission checks
//! but leaves every ACL *change* to the file system (it only parses and
//! validates what a caller sets, and asks the owner question). So, as
//! Linux's `posix_acl.c` does for tmpfs, memfs itself:
//!
//! * folds an access ACL that says no more than the mode bits into the
//!   mode and stores nothing (`equiv_mode`), so `ls -l` and `getfacl` see
//!   what they see on tmpfs;
//! * lets an access ACL's owner, mask (or group) and other entries set the
//!   mode bits, and `chmod` set those entries back (`chmod`): the mode's
//!   group bits are the mask while an ACL has one;
//! * gives a new file its directory's default ACL, cut down by the mode it
//!   was created with, in place of the umask (`create_masq`); a new
//!   directory also inherits the default ACL itself.
//!
//! The value format is `<linux/posix_acl_xattr.h>`'s: a little-endian
//! version word (2), then `{tag: u16, perm: u16, id: u32}` entries sorted by
//! tag and, within the named tags, by id.

use uvfs_vfs::{Errno, VfsResult};

/// The access ACL's attribute name.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's attribute name (directories only).
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;
/// `posix_acl_xattr_size` of the largest ACL the kernel sends (one page).
const MAX_ENTRIES: usize = (4096 - HEADER) / ENTRY;

const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// The id of the unnamed entries (`ACL_UNDEFINED_ID`).
const NO_ID: u32 = u32::MAX;

/// Whether `name` is one of the two ACL attributes.
pub fn is_acl(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A valid ACL (`posix_acl_valid` holds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl(Vec<Entry>);

impl Acl {
    /// Parses and validates an attribute value. `EINVAL` for anything the
    /// kernel would refuse: a wrong version or size, an empty ACL (the
    /// kernel turns that into a removal before it reaches us), entries out
    /// of order, a missing owner, group or other entry, named entries
    /// without a mask, or permission bits beyond rwx.
    pub fn from_xattr(v: &[u8]) -> VfsResult<Acl> {
        if v.len() < HEADER + ENTRY || !(v.len() - HEADER).is_multiple_of(ENTRY) {
            return Err(Errno::EINVAL);
        }
        if (v.len() - HEADER) / ENTRY > MAX_ENTRIES {
            return Err(Errno::E2BIG);
        }
        let word = |at: usize| u32::from_le_bytes(v[at..at + 4].try_into().expect("4 bytes"));
        let half = |at: usize| u16::from_le_bytes(v[at..at + 2].try_into().expect("2 bytes"));
        if word(0) != VERSION {
            return Err(Errno::EINVAL);
        }
        let entries = v[HEADER..]
            .chunks_exact(ENTRY)
            .enumerate()
            .map(|(i, _)| {
                let at = HEADER + i * ENTRY;
                let tag = half(at);
                let named = tag == USER || tag == GROUP;
                Entry {
                    tag,
                    perm: half(at + 2),
                    // Unnamed entries carry no id; store them canonically.
                    id: if named { word(at + 4) } else { NO_ID },
                }
            })
            .collect();
        let acl = Acl(entries);
        acl.validate()?;
        Ok(acl)
    }

    /// The attribute value.
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + ENTRY * self.0.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.0 {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    /// `posix_acl_valid`, as the kernel checks what a caller sets: tags in
    /// order (owner, named users, group, named groups, mask, other), each
    /// unnamed one exactly once, a mask whenever there are named entries
    /// (optional otherwise), no named entry for the unmappable id -1. The
    /// kernel orders nothing within the named entries, so neither do we.
    fn validate(&self) -> VfsResult<()> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.0 {
            if e.perm & !7 != 0 {
                return Err(Errno::EINVAL);
            }
            state = match (e.tag, state) {
                (USER_OBJ, State::UserObj) => State::User,
                (USER, State::User) if e.id != NO_ID => {
                    needs_mask = true;
                    State::User
                }
                (GROUP_OBJ, State::User) => State::Group,
                (GROUP, State::Group) if e.id != NO_ID => {
                    needs_mask = true;
                    State::Group
                }
                (MASK, State::Group) => State::Other,
                (OTHER, State::Other) => State::Done,
                (OTHER, State::Group) if !needs_mask => State::Done,
                _ => return Err(Errno::EINVAL),
            };
        }
        if state == State::Done {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    /// `posix_acl_equiv_mode`: the rwx bits this ACL gives the owner, the
    /// group class (the mask if there is one) and others, and whether the
    /// ACL says more than those bits can (named entries or a mask): only
    /// such an ACL is worth storing.
    pub fn equiv_mode(&self) -> (u16, bool) {
        let mut mode = 0u16;
        let mut extended = false;
        for e in &self.0 {
            match e.tag {
                USER_OBJ => mode |= e.perm << 6,
                GROUP_OBJ => mode |= e.perm << 3,
                OTHER => mode |= e.perm,
                MASK => {
                    // After GROUP_OBJ in a valid ACL: the mask wins.
                    mode = (mode & !0o070) | (e.perm << 3);
                    extended = true;
                }
                _ => extended = true,
            }
        }
        (mode, extended)
    }

    /// `posix_acl_create_masq`: this (a copy of the directory's default
    /// ACL) becomes a new file's access ACL under creation mode `mode`:
    /// each of the owner, group class and other entries keeps only the
    /// bits both allow, and so does the mode. Returns the new rwx bits
    /// and whether the ACL is extended (worth storing).
    pub fn create_masq(&mut self, mode: u16) -> (u16, bool) {
        let mut mode = mode & 0o777;
        let mut extended = false;
        let (mut group_obj, mut mask) = (None, None);
        for (i, e) in self.0.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= mode >> 6;
                    mode &= (e.perm << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= mode & 7;
                    mode &= e.perm | !0o007;
                }
                GROUP_OBJ => group_obj = Some(i),
                MASK => {
                    mask = Some(i);
                    extended = true;
                }
                _ => extended = true,
            }
        }
        // A valid ACL has a group entry, so one of the two is there.
        if let Some(i) = mask.or(group_obj) {
            let e = &mut self.0[i];
            e.perm &= (mode >> 3) & 7;
            mode &= (e.perm << 3) | !0o070;
        }
        (mode & 0o777, extended)
    }

    /// `posix_acl_chmod`: the owner, group class (mask if any) and other
    /// entries take the rwx bits of `mode`; named entries keep theirs.
    pub fn chmod(&mut self, mode: u16) {
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => e.perm = (mode >> 6) & 7,
                OTHER => e.perm = mode & 7,
                MASK => e.perm = (mode >> 3) & 7,
                GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    fn minimal(u: u16, g: u16, o: u16) -> Vec<u8> {
        acl(&[
            (USER_OBJ, u, NO_ID),
            (GROUP_OBJ, g, NO_ID),
            (OTHER, o, NO_ID),
        ])
    }

    #[test]
    fn parse_round_trips_and_canonicalises_unnamed_ids() {
        let v = acl(&[
            (USER_OBJ, 7, 0),
            (USER, 5, 1000),
            (GROUP_OBJ, 4, 77),
            (MASK, 5, 0),
            (OTHER, 0, 3),
        ]);
        let a = Acl::from_xattr(&v).unwrap();
        assert_eq!(
            a.to_xattr(),
            acl(&[
                (USER_OBJ, 7, NO_ID),
                (USER, 5, 1000),
                (GROUP_OBJ, 4, NO_ID),
                (MASK, 5, NO_ID),
                (OTHER, 0, NO_ID),
            ])
        );
    }

    #[test]
    fn invalid_acls_are_refused() {
        let bad = [
            vec![],
            vec![2, 0, 0, 0],                // no entries
            minimal(7, 5, 5)[..11].to_vec(), // torn entry
            {
                let mut v = minimal(7, 5, 5);
                v[0] = 1; // version 1
                v
            },
            minimal(8, 5, 5),                                // perm beyond rwx
            acl(&[(USER_OBJ, 7, NO_ID), (OTHER, 5, NO_ID)]), // no group
            acl(&[
                (GROUP_OBJ, 7, NO_ID),
                (USER_OBJ, 5, NO_ID),
                (OTHER, 5, NO_ID),
            ]),
            // A named entry without a mask.
            acl(&[
                (USER_OBJ, 7, NO_ID),
                (USER, 7, 5),
                (GROUP_OBJ, 5, NO_ID),
                (OTHER, 5, NO_ID),
            ]),
            // A named entry for the unmappable id -1.
            acl(&[
                (USER_OBJ, 7, NO_ID),
                (USER, 7, NO_ID),
                (GROUP_OBJ, 5, NO_ID),
                (MASK, 7, NO_ID),
                (OTHER, 5, NO_ID),
            ]),
            // Something after other.
            acl(&[
                (USER_OBJ, 7, NO_ID),
                (GROUP_OBJ, 5, NO_ID),
                (OTHER, 5, NO_ID),
                (MASK, 7, NO_ID),
            ]),
            acl(&[
                (USER_OBJ, 7, NO_ID),
                (GROUP_OBJ, 5, NO_ID),
                (0x40, 1, 0),
                (OTHER, 5, NO_ID),
            ]),
        ];
        for v in bad {
            assert_eq!(Acl::from_xattr(&v), Err(Errno::EINVAL), "{v:?}");
        }
        let huge = acl(&vec![(USER, 7, 1); MAX_ENTRIES + 1]);
        assert_eq!(Acl::from_xattr(&huge), Err(Errno::E2BIG));
    }

    #[test]
    fn a_minimal_acl_is_the_mode() {
        let a = Acl::from_xattr(&minimal(6, 4, 0)).unwrap();
        assert_eq!(a.equiv_mode(), (0o640, false));
        let m = Acl::from_xattr(&acl(&[
            (USER_OBJ, 7, NO_ID),
            (GROUP_OBJ, 7, NO_ID),
            (MASK, 1, NO_ID),
            (OTHER, 4, NO_ID),
        ]))
        .unwrap();
        // The mask is the group class: ls shows it.
        assert_eq!(m.equiv_mode(), (0o714, true));
    }

    #[test]
    fn create_masq_cuts_both_the_acl_and_the_mode() {
        // Default u::rwx,g::rwx,g:100:r-x,m::rwx,o::rwx on a file made
        // with 0644: the mode becomes 0644 (no umask), the mask r--.
        let mut a = Acl::from_xattr(&acl(&[
            (USER_OBJ, 7, NO_ID),
            (GROUP_OBJ, 7, NO_ID),
            (GROUP, 5, 100),
            (MASK, 7, NO_ID),
            (OTHER, 7, NO_ID),
        ]))
        .unwrap();
        assert_eq!(a.create_masq(0o644), (0o644, true));
        assert_eq!(
            a.to_xattr(),
            acl(&[
                (USER_OBJ, 6, NO_ID),
                (GROUP_OBJ, 7, NO_ID),
                (GROUP, 5, 100),
                (MASK, 4, NO_ID),
                (OTHER, 4, NO_ID),
            ])
        );
        // A minimal default ACL: its bits cut the mode, and nothing needs
        // storing.
        let mut m = Acl::from_xattr(&minimal(7, 5, 0)).unwrap();
        assert_eq!(m.create_masq(0o777), (0o750, false));
    }

    #[test]
    fn chmod_sets_the_mask_not_the_group_entry() {
        let mut a = Acl::from_xattr(&acl(&[
            (USER_OBJ, 7, NO_ID),
            (USER, 7, 9),
            (GROUP_OBJ, 7, NO_ID),
            (MASK, 7, NO_ID),
            (OTHER, 7, NO_ID),
        ]))
        .unwrap();
        a.chmod(0o640);
        assert_eq!(
            a.to_xattr(),
            acl(&[
                (USER_OBJ, 6, NO_ID),
                (USER, 7, 9),
                (GROUP_OBJ, 7, NO_ID),
                (MASK, 4, NO_ID),
                (OTHER, 0, NO_ID),
            ])
        );
        assert_eq!(a.equiv_mode(), (0o640, true));
        let mut m = Acl::from_xattr(&minimal(7, 7, 7)).unwrap();
        m.chmod(0o751);
        assert_eq!(m.to_xattr(), minimal(7, 5, 1));
    }
}
