//! Runs one request batch against the region table, appending the response frame.

use farcache_proto::control::region_split;
use farcache_proto::op::MAX_OP_BYTES;
use farcache_proto::{CacheId, DecodeError, Op, OpCode, RequestDecoder, ResponseEncoder, Status};

use farcache_sproc::outcome::{TAG_CONTINUE, TAG_DONE, encode_failure};

use crate::flow::memory::FlowMemory;
use crate::flow::{Spawned, Step};
use crate::procs::ProcTable;

use crate::metrics::Tally;
use crate::region::Region;
use crate::store::{CacheRegions, StoreMap};

enum Miss<'m> {
    Status(Status),
    Wrong(Option<&'m str>),
}

/// Resolves `[addr, addr+len)` of `cache` to a region and offset on this server.
/// The range must lie within one region: clients split at region boundaries.
fn locate<'m>(c: &'m CacheRegions, addr: u64, len: u64) -> Result<(&'m Region, usize), Miss<'m>> {
    let end = addr
        .checked_add(len)
        .ok_or(Miss::Status(Status::OutOfRange))?;
    if end > c.capacity {
        return Err(Miss::Status(Status::OutOfRange));
    }
    let (idx, off) = region_split(addr, c.region_size);
    if off + len > c.region_size {
        return Err(Miss::Status(Status::OutOfRange));
    }
    match c.regions.get(idx as usize) {
        Some(Some(r)) => Ok((r, off as usize)),
        _ => Err(Miss::Wrong(
            u32::try_from(idx)
                .ok()
                .and_then(|i| c.moved.get(&i))
                .map(String::as_str),
        )),
    }
}

struct Lookup<'m> {
    map: &'m StoreMap,
    last: Option<(CacheId, &'m CacheRegions)>,
}

impl<'m> Lookup<'m> {
    #[inline]
    fn cache(&mut self, id: CacheId) -> Option<&'m CacheRegions> {
        if let Some((last, c)) = self.last
            && last == id
        {
            return Some(c);
        }
        let c = self.map.caches.get(&id)?;
        self.last = Some((id, c));
        Some(c)
    }

    fn find(
        &mut self,
        cache: CacheId,
        addr: u64,
        len: u64,
    ) -> Result<(&'m Region, usize), Miss<'m>> {
        let c = self.cache(cache).ok_or(Miss::Status(Status::NoSuchCache))?;
        locate(c, addr, len)
    }
}

/// The procedure `name` of `cache`, from `last` when the previous EXECUTE named it.
fn proc_for<'p, 'n>(
    procs: &ProcTable,
    last: &'p mut Option<(CacheId, &'n str, crate::procs::ProcRef)>,
    cache: CacheId,
    name: &'n str,
) -> Option<&'p crate::procs::ProcRef> {
    // The decoder hands out the same &str for repeats of a name, so a pointer compare
    // usually decides.
    let hit = matches!(last, Some((c, n, _)) if *c == cache
        && (std::ptr::eq(n.as_ptr(), name.as_ptr()) && n.len() == name.len() || *n == name));
    if !hit {
        *last = Some((cache, name, procs.get(cache, name)?));
    }
    last.as_ref().map(|(_, _, p)| p)
}

fn miss(out: &mut Vec<u8>, enc: &mut ResponseEncoder, op: OpCode, m: Miss<'_>) {
    match m {
        Miss::Status(s) => enc.status(out, op, s),
        Miss::Wrong(owner) => enc.wrong_server(out, op, owner),
    }
}

/// Validates the whole batch first (a malformed batch runs no op at all), then runs
/// every op in order and appends exactly one reply per op, except EXECUTEs that go on
/// at other servers: those leave a hole in the frame and an entry in `spawned`.
#[allow(clippy::too_many_arguments)]
pub fn execute_batch(
    map: &StoreMap,
    payload: &[u8],
    seq: u64,
    out: &mut Vec<u8>,
    max_frame: usize,
    tally: &mut Tally,
    procs: &ProcTable,
    spawned: &mut Vec<Spawned>,
) -> Result<(), DecodeError> {
    RequestDecoder::validate(payload)?;
    let frame_start = out.len();
    let mut enc = ResponseEncoder::begin(out, seq);
    let mut look = Lookup { map, last: None };
    let mut body = Vec::new();
    // A batch usually calls one procedure many times: look it up once.
    let mut last_proc: Option<(CacheId, &str, crate::procs::ProcRef)> = None;
    for op in RequestDecoder::new(payload)? {
        let op = op?;
        let code = op.code();
        let before = out.len();
        match op {
            Op::Read { cache, addr, len } => {
                if len > MAX_OP_BYTES || enc.payload_len(out) + 6 + len as usize > max_frame {
                    enc.status(out, code, Status::TooLarge);
                } else {
                    match look.find(cache, addr, len.into()) {
                        Ok((r, off)) => {
                            enc.data_with(out, code, len as usize, |dst| r.read_into(off, dst))
                        }
                        Err(m) => miss(out, &mut enc, code, m),
                    }
                }
            }
            Op::Write { cache, addr, data } => {
                if data.len() > MAX_OP_BYTES as usize {
                    enc.status(out, code, Status::TooLarge);
                } else {
                    match look.find(cache, addr, data.len() as u64) {
                        Ok((r, off)) => {
                            r.write_from(off, data);
                            enc.status(out, code, Status::Ok);
                        }
                        Err(m) => miss(out, &mut enc, code, m),
                    }
                }
            }
            Op::Cas { cache, addr, .. } | Op::FetchAdd { cache, addr, .. }
                if !addr.is_multiple_of(8) =>
            {
                let _ = cache;
                enc.status(out, code, Status::Misaligned);
            }
            Op::Cas {
                cache,
                addr,
                expected,
                new,
            } => match look.find(cache, addr, 8) {
                Ok((r, off)) => enc.value(out, code, r.cas(off, expected, new)),
                Err(m) => miss(out, &mut enc, code, m),
            },
            Op::FetchAdd { cache, addr, delta } => match look.find(cache, addr, 8) {
                Ok((r, off)) => enc.value(out, code, r.fetch_add(off, delta)),
                Err(m) => miss(out, &mut enc, code, m),
            },
            Op::Execute {
                cache,
                addr,
                proc_name,
                args,
            } => match look.find(cache, addr, 1) {
                Err(m) => miss(out, &mut enc, code, m),
                Ok(_) => match (
                    look.cache(cache),
                    proc_for(procs, &mut last_proc, cache, proc_name),
                ) {
                    (None, _) => enc.status(out, code, Status::NoSuchCache),
                    (_, None) => enc.status(out, code, Status::NoSuchProc),
                    (Some(c), Some(p)) => {
                        // The result goes straight into the reply; only procedures
                        // that go on elsewhere or fail take the slower road below.
                        let mem = FlowMemory::new(c, None);
                        let mark = enc.open_data(out, code);
                        out.push(TAG_DONE);
                        let slow = match p.run_into(&mem, addr, args, out) {
                            Ok(None) => None,
                            Ok(Some(o)) => Some(Ok(o)),
                            Err(e) => Some(Err(e)),
                        };
                        if slow.is_none() && enc.payload_len(out) <= max_frame {
                            enc.close_data(out, mark);
                        } else if slow.is_none() {
                            enc.abandon_data(out, mark);
                            enc.status(out, code, Status::TooLarge);
                        } else if let Some(r) = slow {
                            enc.abandon_data(out, mark);
                            let step = crate::flow::step::next(&**p, c, &mem, addr, r);
                            body.clear();
                            let mut hole = false;
                            match step {
                                Step::Done(r) => {
                                    body.push(TAG_DONE);
                                    body.extend_from_slice(&r);
                                }
                                Step::Fail(e) => encode_failure(&e, &mut body),
                                // No region table from the manager: the client continues it.
                                Step::Ship { addr: next, state } if c.owners.is_empty() => {
                                    body.push(TAG_CONTINUE);
                                    body.extend_from_slice(&next.to_le_bytes());
                                    body.extend_from_slice(&state);
                                }
                                step => {
                                    hole = true;
                                    enc.placeholder();
                                    spawned.push(Spawned {
                                        offset: out.len() - frame_start,
                                        cache,
                                        proc_name: proc_name.to_owned(),
                                        addr,
                                        step,
                                    });
                                }
                            }
                            if hole {
                                // The reply is inserted when the answer comes.
                            } else if enc.payload_len(out) + 6 + body.len() > max_frame {
                                enc.status(out, code, Status::TooLarge)
                            } else {
                                enc.data(out, code, &body)
                            }
                        }
                    }
                },
            },
            Op::Ping => enc.status(out, code, Status::Ok),
        }
        let ok = out.len() == before || out.get(before + 1) == Some(&(Status::Ok as u8));
        let bytes = match op {
            Op::Read { len, .. } => len as usize,
            Op::Write { data, .. } => data.len(),
            _ => 8,
        };
        tally.op(code, if ok { bytes } else { 0 }, ok);
    }
    enc.finish(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RegionStore;
    use farcache_proto::{HEADER_LEN, RequestEncoder, ResponseDecoder, response::ReplyBody};

    fn run(store: &RegionStore, ops: &[Op<'_>]) -> Vec<u8> {
        let mut req = Vec::new();
        let mut e = RequestEncoder::begin(&mut req, 5);
        for op in ops {
            e.push(&mut req, op);
        }
        e.finish(&mut req);
        let mut out = Vec::new();
        execute_batch(
            &store.snapshot(),
            &req[HEADER_LEN..],
            5,
            &mut out,
            1 << 20,
            &mut Tally::default(),
            &ProcTable::default(),
            &mut Vec::new(),
        )
        .unwrap();
        out
    }

    #[test]
    fn ops_against_regions() {
        let store = RegionStore::new(1 << 20);
        store.alloc(7, 0, 4096, 8192).unwrap();
        store.free(7, 1, Some("10.0.0.9:1".into()));
        let out = run(
            &store,
            &[
                Op::Write {
                    cache: 7,
                    addr: 100,
                    data: b"abcdefgh",
                },
                Op::Read {
                    cache: 7,
                    addr: 100,
                    len: 8,
                },
                Op::Cas {
                    cache: 7,
                    addr: 104,
                    expected: 0,
                    new: 1,
                },
                Op::FetchAdd {
                    cache: 7,
                    addr: 200,
                    delta: 5,
                },
                Op::FetchAdd {
                    cache: 7,
                    addr: 200,
                    delta: 5,
                },
                Op::Read {
                    cache: 7,
                    addr: 4090,
                    len: 10,
                },
                Op::Read {
                    cache: 7,
                    addr: 5000,
                    len: 8,
                },
                Op::Read {
                    cache: 7,
                    addr: 9000,
                    len: 8,
                },
                Op::Read {
                    cache: 8,
                    addr: 0,
                    len: 8,
                },
                Op::Cas {
                    cache: 7,
                    addr: 3,
                    expected: 0,
                    new: 0,
                },
                Op::Read {
                    cache: 7,
                    addr: u64::MAX,
                    len: 8,
                },
            ],
        );
        let r: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(r[0].status, Status::Ok);
        assert_eq!(r[1].body, ReplyBody::Data(b"abcdefgh"));
        assert_eq!(
            r[2].body,
            ReplyBody::Value(0x6867_6665),
            "CAS fails and returns the old word"
        );
        assert_eq!(r[3].body, ReplyBody::Value(0));
        assert_eq!(r[4].body, ReplyBody::Value(5));
        assert_eq!(r[5].status, Status::OutOfRange, "spans a region boundary");
        assert_eq!(r[6].body, ReplyBody::Owner(Some("10.0.0.9:1")));
        assert_eq!(r[7].status, Status::OutOfRange, "beyond capacity");
        assert_eq!(r[8].status, Status::NoSuchCache);
        assert_eq!(r[9].status, Status::Misaligned);
        assert_eq!(r[10].status, Status::OutOfRange);
    }
}
