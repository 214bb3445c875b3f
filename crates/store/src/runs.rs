//! Multi-key runs: a batch's per-key arguments grouped by the server holding each
//! key's shard, one run (`kv_mput`, `kv_medit`) per server for up to
//! [`MGET_KEYS`](crate::lookup::MGET_KEYS) keys, as `[count u32]` then per key its
//! bucket's address (u64), its arguments' length (u32) and its arguments.

use farcache_client::{Batch, BatchResults, OpError, Status};
use farcache_kvformat::FormatError;

/// One key's part of a multi-key run.
pub(crate) struct KeyRun {
    pub server: u32,
    pub bucket_addr: u64,
    pub args: Vec<u8>,
}

/// Adds `keys`' runs to `b`: `proc` for a group of keys, `single` (if any) with
/// the key's own arguments for a key alone on its server. Per op added: the op
/// and the indices of the keys it carries, in order.
pub(crate) fn add_runs(
    b: &mut Batch,
    keys: &[KeyRun],
    proc: &str,
    single: Option<&str>,
) -> Vec<(usize, Vec<usize>)> {
    let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        match groups.iter_mut().find(|(s, _)| *s == k.server) {
            Some((_, g)) => g.push(i),
            None => groups.push((k.server, vec![i])),
        }
    }
    let mut ops = Vec::new();
    let mut many = Vec::new();
    for (_, g) in &groups {
        for chunk in g.chunks(crate::lookup::MGET_KEYS) {
            let op = match (chunk, single) {
                ([i], Some(one)) => b.execute(one, keys[*i].bucket_addr, &keys[*i].args),
                _ => {
                    many.clear();
                    many.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
                    for &i in chunk {
                        let k = &keys[i];
                        many.extend_from_slice(&k.bucket_addr.to_le_bytes());
                        many.extend_from_slice(&(k.args.len() as u32).to_le_bytes());
                        many.extend_from_slice(&k.args);
                    }
                    b.execute(proc, keys[chunk[0]].bucket_addr, &many)
                }
            };
            ops.push((op, chunk.to_vec()));
        }
    }
    ops
}

/// Why a run's replies could not be had.
pub(crate) struct RunFailed {
    pub why: String,
    /// The server has no such procedure: the run never ran.
    pub never_ran: bool,
}

/// Op `op`'s replies, decoded by `decode`: one per key of the `keys` it carried.
pub(crate) fn run_replies<T>(
    r: &BatchResults,
    op: usize,
    keys: usize,
    decode: impl FnOnce(&[u8]) -> Result<Vec<T>, FormatError>,
) -> Result<Vec<T>, RunFailed> {
    let replies = r.bytes(op).map_err(|e| e.to_string()).and_then(|raw| {
        decode(&raw)
            .map_err(|e| e.to_string())
            .and_then(|v| match v.len() == keys {
                true => Ok(v),
                false => Err(format!("{} outcomes for {keys} keys", v.len())),
            })
    });
    replies.map_err(|why| RunFailed {
        why,
        never_ran: matches!(r.error(op), Some(OpError::Status(Status::NoSuchProc))),
    })
}
