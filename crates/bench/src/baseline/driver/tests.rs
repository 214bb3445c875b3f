use super::*;

#[test]
fn key_spelling_matches_redis_benchmark() {
    assert_eq!(&key_digits(12345), b"000000012345");
    assert_eq!(&key_digits(0), b"000000000000");
    assert_eq!(&key_digits(MAX_KEYS - 1), b"999999999999");
    assert_eq!(key_name(12345), "key:000000012345");
    assert_eq!(key_name(7).len(), KEY_LEN);
}

#[test]
fn ring_is_whole_batches_in_range() {
    let mut k = KeySource::random(10, 7, 1);
    let KeySource::Ring { ring, .. } = &k else {
        panic!("not a ring")
    };
    assert_eq!(ring.len() % 7, 0);
    assert!(ring.len() >= 1024);
    assert!(
        ring.iter()
            .all(|d| d[..11] == *b"00000000000" && d[11] < b'0' + 10)
    );
    for _ in 0..1000 {
        assert_eq!(k.next_batch().map(<[_]>::len), Some(7));
    }
}

#[test]
fn sequential_source_covers_range() {
    let mut k = KeySource::sequential(5..12, 3);
    let mut seen = Vec::new();
    while let Some(b) = k.next_batch() {
        seen.extend(b.iter().map(|d| d.to_vec()));
    }
    let want: Vec<Vec<u8>> = (5..12).map(|i| key_digits(i).to_vec()).collect();
    assert_eq!(seen, want);
}

#[test]
fn line_and_int_helpers() {
    assert_eq!(find_crlf("t", b"abc\r\nx", 10).ok(), Some(Some(3)));
    assert_eq!(find_crlf("t", b"abc\r", 10).ok(), Some(None));
    assert!(find_crlf("t", b"abc\nx", 10).is_err());
    assert!(find_crlf("t", b"0123456789ab", 10).is_err());
    assert_eq!(parse_int("t", b"-1").ok(), Some(-1));
    assert_eq!(parse_int("t", b"4096").ok(), Some(4096));
    assert!(parse_int("t", b"").is_err());
    assert!(parse_int("t", b"-").is_err());
    assert!(parse_int("t", b"12a").is_err());
    assert!(parse_int("t", b"9999999999999999999999").is_err());
}
