;; sum_pull: `sum` with DFlow instead of FFlow. Same args (base u64, n u32, next u32,
;; partial u64) and result. At the first record held by another server it asks the
;; server to pull every remaining record here (`pull`, one range; the server splits it
;; per region and fetches from each owner), saves its state and returns 6; run again
;; on the same server, all its reads succeed.
(module
  (import "farcache" "read" (func $read (param i64 i32 i32) (result i32)))
  (import "farcache" "output" (func $output (param i32 i32)))
  (import "farcache" "pull" (func $pull (param i64 i32)))
  (memory (export "memory") 1)
  (func (export "alloc") (param $n i32) (result i32) (i32.const 1024))
  (func (export "run") (param $addr i64) (param $args i32) (param $len i32) (result i32)
    (local $base i64) (local $n i32) (local $i i32) (local $acc i64) (local $at i64)
    (if (i32.ne (local.get $len) (i32.const 24)) (then unreachable))
    (local.set $base (i64.load (local.get $args)))
    (local.set $n (i32.load offset=8 (local.get $args)))
    (local.set $i (i32.load offset=12 (local.get $args)))
    (local.set $acc (i64.load offset=16 (local.get $args)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $at
          (i64.add (local.get $base)
                   (i64.mul (i64.extend_i32_u (local.get $i)) (i64.const 8))))
        (if (i32.eq (call $read (local.get $at) (i32.const 8) (i32.const 0)) (i32.const 1))
          (then
            ;; Everything from here to the last record, in one pull.
            (call $pull (local.get $at)
              (i32.mul (i32.sub (local.get $n) (local.get $i)) (i32.const 8)))
            (i64.store (i32.const 64) (local.get $base))
            (i32.store (i32.const 72) (local.get $n))
            (i32.store (i32.const 76) (local.get $i))
            (i64.store (i32.const 80) (local.get $acc))
            (call $output (i32.const 64) (i32.const 24))
            (return (i32.const 6))))
        (local.set $acc (i64.add (local.get $acc) (i64.load (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i64.store (i32.const 0) (local.get $acc))
    (call $output (i32.const 0) (i32.const 8))
    (i32.const 0)))
