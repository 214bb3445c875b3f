//! A Redis RDB snapshot of the benchmark keyspace, for
//! [`super::redis::RedisServer::start_preloaded`].
//!
//! Why: Redis runs commands on one thread, so filling 16 M keys through
//! `MSET` costs ~1 µs per key on a small VM (~15 s) plus the dict's
//! incremental rehashing as it doubles. Loading a snapshot skips command
//! parsing and, with the `RESIZEDB` hint, sizes the dict once: about 1.5×
//! faster, and the file itself is written in well under a second.
//!
//! The format written is the subset every Redis since 3.2 loads (RDB
//! version 7): `SELECTDB 0`, `RESIZEDB`, plain string entries, `EOF` and a
//! zero checksum (which Redis documents as "checksum disabled").

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::driver::{key_digits, validate_keyspace, value_bytes};
use crate::error::Result;

/// `REDIS` + 4-digit RDB version.
const MAGIC: &[u8] = b"REDIS0007";
const OPCODE_RESIZEDB: u8 = 0xFB;
const OPCODE_SELECTDB: u8 = 0xFE;
const OPCODE_EOF: u8 = 0xFF;
const TYPE_STRING: u8 = 0;

/// Appends an RDB length: 6, 14, 32 or 64 bits.
fn push_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Writes a snapshot holding `key:%012d` → [`value_bytes`]`(value_size)`
/// for every key in `0..keys` to `path`; returns its size in bytes.
pub fn write_rdb(path: &Path, keys: u64, value_size: usize) -> Result<u64> {
    validate_keyspace(keys)?;
    let mut head = MAGIC.to_vec();
    head.extend_from_slice(&[OPCODE_SELECTDB, 0, OPCODE_RESIZEDB]);
    push_len(&mut head, keys);
    push_len(&mut head, 0);
    // One entry: type, key (length 16 + "key:" + digits), value.
    let mut entry = vec![TYPE_STRING, 16];
    entry.extend_from_slice(b"key:");
    let digits_at = entry.len();
    entry.extend_from_slice(&key_digits(0));
    push_len(&mut entry, value_size as u64);
    entry.extend_from_slice(&value_bytes(value_size));

    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    w.write_all(&head)?;
    for k in 0..keys {
        entry[digits_at..digits_at + 12].copy_from_slice(&key_digits(k));
        w.write_all(&entry)?;
    }
    w.write_all(&[OPCODE_EOF, 0, 0, 0, 0, 0, 0, 0, 0])?;
    w.flush()?;
    let written = head.len() as u64 + keys * entry.len() as u64 + 9;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_encodings() {
        let enc = |n| {
            let mut v = Vec::new();
            push_len(&mut v, n);
            v
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(63), [63]);
        assert_eq!(enc(64), [0x40, 64]);
        assert_eq!(enc(16383), [0x7F, 0xFF]);
        assert_eq!(enc(16384), [0x80, 0, 0, 0x40, 0]);
        assert_eq!(enc(1 << 32), [0x81, 0, 0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn writes_expected_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dump.rdb");
        let n = write_rdb(&path, 2, 3).expect("write");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len() as u64, n);
        let mut want = b"REDIS0007\xFE\x00\xFB\x02\x00".to_vec();
        want.extend_from_slice(b"\x00\x10key:000000000000\x03abc");
        want.extend_from_slice(b"\x00\x10key:000000000001\x03abc");
        want.extend_from_slice(b"\xFF\0\0\0\0\0\0\0\0");
        assert_eq!(bytes, want);
    }
}
