//! Redis's glob-style patterns (`KEYS`, `SCAN MATCH`, `CONFIG GET`): `*`, `?`,
//! `[abc]`, `[^a]`, `[a-z]`, and `\` escaping the next byte.

/// Whether `s` matches `p`, as Redis's `stringmatchlen` decides.
pub fn matches(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // Where the last `*` was, and how much of `s` it had taken then.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    let (hit, end) = class(p, pi, s[si]);
                    if hit {
                        pi = end;
                        si += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() => {
                    if p[pi + 1] == s[si] {
                        pi += 2;
                        si += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[si] {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last `*` take one more byte.
        match star {
            Some((sp, ss)) => {
                star = Some((sp, ss + 1));
                pi = sp + 1;
                si = ss + 1;
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Matches byte `c` against the class opening at `p[at] == b'['`: whether it hit,
/// and where the pattern goes on after the class.
fn class(p: &[u8], at: usize, c: u8) -> (bool, usize) {
    let mut i = at + 1;
    let not = p.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    loop {
        // Redis takes an unterminated class as ending with the pattern.
        let Some(&x) = p.get(i) else {
            return (hit != not, p.len());
        };
        match x {
            b']' => break,
            b'\\' if i + 1 < p.len() => {
                hit |= p[i + 1] == c;
                i += 2;
            }
            lo if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&h| h != b']') => {
                let hi = p[i + 2];
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                hit |= (lo..=hi).contains(&c);
                i += 3;
            }
            _ => {
                hit |= x == c;
                i += 1;
            }
        }
    }
    (hit != not, i + 1)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn follows_redis_globs() {
        let yes = [
            ("*", ""),
            ("*", "abc"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h*llo", "hllo"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("user:*", "user:42"),
            ("a\\*b", "a*b"),
            ("*:*:x", "a:b:c:x"),
            ("[\\]]", "]"),
            ("[abc", "a"),
        ];
        let no = [
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("user:*", "use"),
            ("a\\*b", "axb"),
            ("abc", "ab"),
            ("ab", "abc"),
            ("[abc", "d"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes()), "{p} should match {s}");
        }
        for (p, s) in no {
            assert!(
                !matches(p.as_bytes(), s.as_bytes()),
                "{p} should not match {s}"
            );
        }
    }
}
