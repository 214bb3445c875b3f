//! Splitting a cache range into per-server parts: at region boundaries (each region may
//! live on a different server) and at the protocol's per-op size limit.

use farcache_proto::ServerId;
use farcache_proto::control::CacheInfo;
use farcache_proto::op::MAX_OP_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub server: ServerId,
    pub addr: u64,
    pub len: u32,
    /// Offset of this part within the op's range.
    pub op_off: u64,
}

/// Calls `f` for each part of `[addr, addr+len)`, in address order. The caller has
/// checked the range against the capacity.
pub(crate) fn split(info: &CacheInfo, addr: u64, len: u64, mut f: impl FnMut(Part)) {
    let mut at = addr;
    let end = addr + len;
    if len == 0 {
        let server = info.regions.get(info.region_of(addr)).copied().unwrap_or(0);
        return f(Part {
            server,
            addr,
            len: 0,
            op_off: 0,
        });
    }
    while at < end {
        let region = info.region_of(at);
        let region_end = (region as u64 + 1) * info.region_size;
        let n = (end.min(region_end) - at).min(u64::from(MAX_OP_BYTES));
        let server = info.regions.get(region).copied().unwrap_or(0);
        f(Part {
            server,
            addr: at,
            len: n as u32,
            op_off: at - addr,
        });
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(regions: Vec<ServerId>, region_size: u64) -> CacheInfo {
        CacheInfo {
            id: 1,
            name: "t".into(),
            capacity: regions.len() as u64 * region_size,
            region_size,
            epoch: 1,
            regions,
            servers: vec![],
            replicas: 1,
            backups: vec![],
            from_file: None,
            slo: None,
        }
    }

    #[test]
    fn splits_at_regions_and_op_limit() {
        let i = info(vec![1, 2, 3], 4096);
        let mut parts = vec![];
        split(&i, 4000, 5000, |p| parts.push(p));
        assert_eq!(
            parts,
            vec![
                Part {
                    server: 1,
                    addr: 4000,
                    len: 96,
                    op_off: 0
                },
                Part {
                    server: 2,
                    addr: 4096,
                    len: 4096,
                    op_off: 96
                },
                Part {
                    server: 3,
                    addr: 8192,
                    len: 808,
                    op_off: 4192
                },
            ]
        );
        let big = info(vec![7], 4 << 20);
        let mut n = 0;
        split(&big, 0, 3 << 20, |p| {
            assert_eq!(p.len, MAX_OP_BYTES);
            n += 1;
        });
        assert_eq!(n, 3);
    }
}
