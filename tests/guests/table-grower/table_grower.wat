;; `table-grower`: a contributor written as a core module (the build embeds
;; the contributor world and encodes it as a component). Its `resolve` grows a
;; funcref table to 30,000 elements, past the default limit and the engine's
;; pool slot (20,000): the host must name the limit, not fail in the pool.
;; On success it returns no pairs; when `table.grow` refuses (returns -1)
;; without a trap, it returns `err("table.grow refused")`.
(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (global $heap (mut i32) (i32.const 4096))

  ;; Strings, then the declaration's records (canonical ABI, little-endian).
  (data (i32.const 256) "table-grower")
  (data (i32.const 288) "DSH_TABLE_GROWER")
  (data (i32.const 320) "Never returned: resolve grows a table.")
  (data (i32.const 400) "table.grow refused")
  ;; key-declaration { key: (288, 16), description: (320, 38) }
  (data (i32.const 448) "\20\01\00\00\10\00\00\00\40\01\00\00\26\00\00\00")
  ;; declaration { name: (256, 12), keys: (448, 1) }
  (data (i32.const 480) "\00\01\00\00\0c\00\00\00\c0\01\00\00\01\00\00\00")

  (func (export "declare") (result i32)
    (i32.const 480))

  ;; execution, flattened: three strings, the mode, and option<agent>.
  (func (export "resolve")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)
    (result i32)
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 29999)) (i32.const -1))
      (then
        ;; result::err("table.grow refused")
        (i32.store8 (i32.const 512) (i32.const 1))
        (i32.store (i32.const 516) (i32.const 400))
        (i32.store (i32.const 520) (i32.const 18))
        (return (i32.const 512))))
    ;; result::ok([])
    (i32.store8 (i32.const 528) (i32.const 0))
    (i32.store (i32.const 532) (i32.const 0))
    (i32.store (i32.const 536) (i32.const 0))
    (i32.const 528))

  ;; A bump allocator: enough for one call's arguments.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p)))
