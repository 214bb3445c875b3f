//! `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`: the longest common
//! subsequence of two string values, its length, or the matching ranges, walked back
//! from the ends of both strings as Redis does (so the ranges come out in Redis's
//! order). A missing key is the empty string.

use super::int_arg;
use crate::error::store_error_line;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

/// Cells of the dynamic-programming table at most (4 bytes each): two values whose
/// table would pass this are refused rather than held in memory.
const MAX_CELLS: usize = 1 << 27;

#[derive(Default)]
struct Opts {
    len: bool,
    idx: bool,
    min_match: usize,
    with_match_len: bool,
}

fn parse(a: &Args) -> Result<Opts, &'static str> {
    let mut o = Opts::default();
    let mut i = 3;
    while i < a.len() {
        let w = a[i].to_ascii_lowercase();
        match &w[..] {
            b"len" => o.len = true,
            b"idx" => o.idx = true,
            b"withmatchlen" => o.with_match_len = true,
            b"minmatchlen" if i + 1 < a.len() => {
                i += 1;
                // Redis takes a negative minimum as none.
                o.min_match = usize::try_from(int_arg(&a[i])?.max(0)).unwrap_or(0);
            }
            _ => return Err("ERR syntax error"),
        }
        i += 1;
    }
    if o.len && o.idx {
        return Err("ERR If you want both the length and indexes, please just use IDX.");
    }
    Ok(o)
}

pub fn lcs(s: &mut Session, a: &Args, out: &mut Out) {
    let o = match parse(a) {
        Ok(o) => o,
        Err(e) => return out.error(e),
    };
    let vals = match s.shared.store.mget(&a[1..3]) {
        Ok(v) => v,
        Err(e) => return out.error(&store_error_line(&e)),
    };
    let mut strings = Vec::with_capacity(2);
    for v in vals {
        match v {
            Ok(v) => strings.push(v.unwrap_or_default()),
            Err(e) => return out.error(&store_error_line(&e)),
        }
    }
    let (x, y) = (&strings[0][..], &strings[1][..]);
    let cells = (x.len() + 1).saturating_mul(y.len() + 1);
    if cells > MAX_CELLS {
        return out.error(
            "ERR Insufficient memory, transient memory for LCS exceeds the front end's limit",
        );
    }
    let (table, w, total) = lengths(x, y);
    if o.len {
        return out.int(total as i64);
    }
    let (seq, ranges) = walk_back(x, y, &table, w, total);
    if !o.idx {
        return out.bulk(&seq);
    }
    let kept: Vec<&Range> = ranges
        .iter()
        .filter(|r| o.min_match == 0 || r.len() >= o.min_match)
        .collect();
    out.map(2);
    out.bulk(b"matches");
    out.array(kept.len());
    for r in kept {
        out.array(2 + usize::from(o.with_match_len));
        out.array(2);
        out.int(r.x.0 as i64);
        out.int(r.x.1 as i64);
        out.array(2);
        out.int(r.y.0 as i64);
        out.int(r.y.1 as i64);
        if o.with_match_len {
            out.int(r.len() as i64);
        }
    }
    out.bulk(b"len");
    out.int(total as i64);
}

/// The table of LCS lengths (`t[i * w + j]`: of `x[..i]` and `y[..j]`), its row
/// width `w`, and the whole LCS's length.
fn lengths(x: &[u8], y: &[u8]) -> (Vec<u32>, usize, usize) {
    let w = y.len() + 1;
    let mut t = vec![0u32; (x.len() + 1) * w];
    for i in 1..=x.len() {
        for j in 1..=y.len() {
            t[i * w + j] = if x[i - 1] == y[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    let total = t[x.len() * w + y.len()] as usize;
    (t, w, total)
}

/// A run matching in both strings: inclusive positions in each.
struct Range {
    x: (usize, usize),
    y: (usize, usize),
}

impl Range {
    fn len(&self) -> usize {
        self.x.1 - self.x.0 + 1
    }
}

/// The subsequence and its contiguous runs, from the ends of both strings back.
fn walk_back(x: &[u8], y: &[u8], table: &[u32], w: usize, total: usize) -> (Vec<u8>, Vec<Range>) {
    let mut seq = vec![0u8; total];
    let mut ranges = Vec::new();
    let (mut i, mut j, mut k) = (x.len(), y.len(), total);
    let mut cur: Option<Range> = None;
    while i > 0 && j > 0 {
        let mut emit = false;
        if x[i - 1] == y[j - 1] {
            k -= 1;
            seq[k] = x[i - 1];
            match &mut cur {
                None => {
                    cur = Some(Range {
                        x: (i - 1, i - 1),
                        y: (j - 1, j - 1),
                    })
                }
                Some(r) if r.x.0 == i && r.y.0 == j => {
                    r.x.0 -= 1;
                    r.y.0 -= 1;
                }
                Some(_) => emit = true,
            }
            if cur.as_ref().is_some_and(|r| r.x.0 == 0 || r.y.0 == 0) {
                emit = true;
            }
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * w + j] > table[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = cur.is_some();
        }
        if emit && let Some(r) = cur.take() {
            ranges.push(r);
        }
    }
    (seq, ranges)
}

#[cfg(test)]
mod tests {
    use super::{lengths, walk_back};

    type Span = (usize, usize);

    fn run(x: &[u8], y: &[u8]) -> (Vec<u8>, Vec<(Span, Span)>) {
        let (t, w, total) = lengths(x, y);
        let (s, r) = walk_back(x, y, &t, w, total);
        (s, r.into_iter().map(|r| (r.x, r.y)).collect())
    }

    #[test]
    fn matches_the_redis_docs_example() {
        // LCS key1 key2 IDX on "ohmytext" / "mynewtext" (Redis docs).
        let (seq, ranges) = run(b"ohmytext", b"mynewtext");
        assert_eq!(seq, b"mytext");
        assert_eq!(ranges, vec![((4, 7), (5, 8)), ((2, 3), (0, 1))]);
        assert_eq!(run(b"", b"abc").0, b"");
    }
}
