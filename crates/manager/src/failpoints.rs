//! Named failpoints in the manager (the `fail` crate; see the server's
//! `failpoints` module for how a process reads `FAILPOINTS`). Builds without the
//! `failpoints` feature compile every point to `false`.
//!
//! | name | where |
//! |---|---|
//! | `etcd-cache-commit-answer-lost` | a commit that writes a cache record was answered by etcd; with `return` the answer is dropped, as by a connection lost after the request went out |
//! | `manager-before-create-commit` | a create placed its regions on servers and is about to commit the cache (`sleep` holds it there) |
//! | `manager-before-reshape-commit` | a reshape placed new regions and told servers the new capacity, and is about to commit the table |
//! | `etcd-cache-commit-unsent` | a commit that writes a cache record is about to go to etcd; with `return` it is not sent, and the manager sees no answer |

/// Whether failpoint `name` is set to act now.
pub(crate) fn hit(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        fail::eval(name, |_| ()).is_some()
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}
