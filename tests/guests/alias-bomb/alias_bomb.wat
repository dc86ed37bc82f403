;; `alias-bomb`: a contributor written as a core module (the build embeds the
;; contributor world and encodes it as a component). Its `resolve` returns
;; 1,000 pairs whose values all point at the same 64 KiB of its memory: about
;; 64 MiB for the host to copy, from 80 KiB of guest memory. The host must stop
;; copying at its per-call data limit and name it.
(module
  (memory (export "memory") 4)
  (global $heap (mut i32) (i32.const 4096))

  ;; Strings, then the declaration's records (canonical ABI, little-endian).
  (data (i32.const 256) "alias-bomb")
  (data (i32.const 288) "DSH_ALIAS")
  (data (i32.const 320) "Never returned: resolve aliases one value 1,000 times.")
  ;; key-declaration { key: (288, 9), description: (320, 54) }
  (data (i32.const 448) "\20\01\00\00\09\00\00\00\40\01\00\00\36\00\00\00")
  ;; declaration { name: (256, 10), keys: (448, 1) }
  (data (i32.const 480) "\00\01\00\00\0a\00\00\00\c0\01\00\00\01\00\00\00")

  (func (export "declare") (result i32)
    (i32.const 480))

  ;; execution, flattened: three strings, the mode, and option<agent>.
  (func (export "resolve")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)
    (result i32)
    (local $entry i32)
    ;; 1,000 tuples of (key: (288, 9), value: (65536, 65536)) at 131072.
    (local.set $entry (i32.const 131072))
    (loop $fill
      (i32.store (local.get $entry) (i32.const 288))
      (i32.store offset=4 (local.get $entry) (i32.const 9))
      (i32.store offset=8 (local.get $entry) (i32.const 65536))
      (i32.store offset=12 (local.get $entry) (i32.const 65536))
      (local.set $entry (i32.add (local.get $entry) (i32.const 16)))
      (br_if $fill (i32.lt_u (local.get $entry) (i32.const 147072))))
    ;; result::ok(list at 131072, 1,000 entries)
    (i32.store8 (i32.const 512) (i32.const 0))
    (i32.store (i32.const 516) (i32.const 131072))
    (i32.store (i32.const 520) (i32.const 1000))
    (i32.const 512))

  ;; A bump allocator: enough for one call's arguments.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p)))
