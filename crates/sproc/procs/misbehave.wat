;; Misbehaving procedures for sandbox tests. args: one byte selecting the failure:
;; 0 loops forever, 1 traps, 2 grows memory past the limit, 3 reads outside the cache,
;; 4 returns an undefined code.
(module
  (import "farcache" "read" (func $read (param i64 i32 i32) (result i32)))
  (import "farcache" "output" (func $output (param i32 i32)))
  (import "farcache" "continue_at" (func $continue_at (param i64)))
  (memory (export "memory") 1)
  (func (export "alloc") (param $n i32) (result i32) (i32.const 1024))
  (func (export "run") (param $addr i64) (param $args i32) (param $len i32) (result i32)
    (local $mode i32)
    (local.set $mode (i32.load8_u (local.get $args)))
    (if (i32.eq (local.get $mode) (i32.const 0))
      (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $mode) (i32.const 1))
      (then unreachable))
    (if (i32.eq (local.get $mode) (i32.const 2))
      (then (drop (memory.grow (i32.const 4096)))))
    (if (i32.eq (local.get $mode) (i32.const 3))
      (then (drop (call $read (i64.const -16) (i32.const 8) (i32.const 0)))))
    (i32.const 7)))
