//! Who may use a front end: clients `AUTH` with one of the cache's tokens (the same
//! strings `farcache token` prints), and a read-only token may only read.

/// What a connection may do once authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadWrite,
    ReadOnly,
}

/// How connections prove themselves.
#[derive(Debug, Clone)]
pub enum AuthPolicy {
    /// No `AUTH` needed (loopback demos and benchmarks); every connection may write.
    Open,
    /// `AUTH <token>` (or `AUTH default <token>`, `HELLO 3 AUTH default <token>`).
    Tokens {
        read_write: String,
        read_only: Option<String>,
    },
}

impl AuthPolicy {
    /// Access before any `AUTH`.
    pub fn initial(&self) -> Option<Access> {
        match self {
            Self::Open => Some(Access::ReadWrite),
            Self::Tokens { .. } => None,
        }
    }

    pub fn requires_auth(&self) -> bool {
        matches!(self, Self::Tokens { .. })
    }

    /// The access `password` grants, if any.
    pub fn check(&self, password: &[u8]) -> Option<Access> {
        match self {
            Self::Open => Some(Access::ReadWrite),
            Self::Tokens {
                read_write,
                read_only,
            } => {
                if same(password, read_write.as_bytes()) {
                    Some(Access::ReadWrite)
                } else if read_only
                    .as_deref()
                    .is_some_and(|t| same(password, t.as_bytes()))
                {
                    Some(Access::ReadOnly)
                } else {
                    None
                }
            }
        }
    }
}

/// Equality whose time does not depend on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_grant_their_rights() {
        let p = AuthPolicy::Tokens {
            read_write: "rw-token".into(),
            read_only: Some("ro-token".into()),
        };
        assert_eq!(p.initial(), None);
        assert_eq!(p.check(b"rw-token"), Some(Access::ReadWrite));
        assert_eq!(p.check(b"ro-token"), Some(Access::ReadOnly));
        assert_eq!(p.check(b"rw-tokeN"), None);
        assert_eq!(p.check(b""), None);
    }
}
