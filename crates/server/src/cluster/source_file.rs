//! Regions of read-only caches loaded from a file on this server's file system.

use std::fs::File;
use std::os::unix::fs::FileExt;

use farcache_proto::CacheId;
use farcache_proto::control::FileSlice;

use crate::cluster::Shared;

/// Bytes read per call: large enough to run at disk speed, small enough to stay in
/// the page cache's stride.
const CHUNK: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read {len} bytes at {offset} of {path}: {source}")]
    Read {
        path: String,
        offset: u64,
        len: u64,
        source: std::io::Error,
    },
    #[error("{len} bytes do not fit region {region} of cache {cache}")]
    TooLong {
        cache: CacheId,
        region: u32,
        len: u64,
    },
    #[error("the region is not held here")]
    Gone,
    #[error("this server loads no file (start it with --load-dir)")]
    NotAllowed,
    #[error("{path} is not under this server's --load-dir {dir}")]
    Outside { path: String, dir: String },
}

/// The file behind `path` if it lies under the server's `--load-dir` (symbolic links
/// resolved, so none leads out of it).
fn permitted(sh: &Shared, path: &str) -> Result<std::path::PathBuf, LoadError> {
    let dir = sh.config.load_dir.as_ref().ok_or(LoadError::NotAllowed)?;
    let open_err = |source| LoadError::Open {
        path: path.to_owned(),
        source,
    };
    let real = std::fs::canonicalize(path).map_err(open_err)?;
    let root = std::fs::canonicalize(dir).map_err(|source| LoadError::Open {
        path: dir.display().to_string(),
        source,
    })?;
    if !real.starts_with(&root) {
        return Err(LoadError::Outside {
            path: path.to_owned(),
            dir: root.display().to_string(),
        });
    }
    Ok(real)
}

/// Fills region `region` of `cache` (placed lost) from `slice`, then makes those
/// bytes data: until then reads answer `DATA_LOST`, never zeros.
pub fn load(sh: &Shared, cache: CacheId, region: u32, slice: &FileSlice) -> Result<(), LoadError> {
    let real = permitted(sh, &slice.path)?;
    let r = sh.store.region(cache, region).ok_or(LoadError::Gone)?;
    if slice.len > r.len() as u64 {
        return Err(LoadError::TooLong {
            cache,
            region,
            len: slice.len,
        });
    }
    let f = File::open(&real).map_err(|source| LoadError::Open {
        path: slice.path.clone(),
        source,
    })?;
    let mut buf = vec![0u8; CHUNK.min(slice.len as usize)];
    let mut done = 0u64;
    while done < slice.len {
        let n = (slice.len - done).min(buf.len() as u64) as usize;
        let at = slice.offset + done;
        f.read_exact_at(&mut buf[..n], at)
            .map_err(|source| LoadError::Read {
                path: slice.path.clone(),
                offset: at,
                len: n as u64,
                source,
            })?;
        if !r.write_from(done as usize, &buf[..n]) {
            return Err(LoadError::Gone);
        }
        done += n as u64;
    }
    let rs = r.len() as u64;
    // The whole region is data now: the file's bytes, and zeros past its end.
    sh.store
        .forget_lost(cache, u64::from(region).saturating_mul(rs), rs);
    Ok(())
}
