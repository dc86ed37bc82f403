;; `contract-test`: a contributor for the test-only contract version
;; `dsh:env@0.2.0-test` (host/core/wit/test-contract), whose `execution` has
;; one more field than 0.1.0's, `nested`. Written as a core module (the build
;; embeds that world and encodes it as a component). Its `resolve` returns
;; DSH_CONTRACT_NESTED=yes|no from the new field and DSH_CONTRACT_TOOL from
;; `tool`, so a host that passed the record of another version fails the test.
;; The build also encodes it for `dsh:env@1.0.0`, a version no host binds.
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))

  ;; Strings, then the declaration's records (canonical ABI, little-endian).
  (data (i32.const 256) "contract-test")
  (data (i32.const 288) "DSH_CONTRACT_NESTED")
  (data (i32.const 320) "Whether the call is nested: a field only dsh:env@0.2.0-test has.")
  (data (i32.const 400) "DSH_CONTRACT_TOOL")
  (data (i32.const 448) "The tool, a field before the new one.")
  (data (i32.const 496) "yes")
  (data (i32.const 500) "no")
  ;; key-declarations { key: (288, 19), description: (320, 64) },
  ;; { key: (400, 17), description: (448, 37) }
  (data (i32.const 512) "\20\01\00\00\13\00\00\00\40\01\00\00\40\00\00\00\90\01\00\00\11\00\00\00\c0\01\00\00\25\00\00\00")
  ;; declaration { name: (256, 13), keys: (512, 2) }
  (data (i32.const 544) "\00\01\00\00\0d\00\00\00\00\02\00\00\02\00\00\00")

  (func (export "declare") (result i32)
    (i32.const 544))

  ;; The execution flattens to 17 values, past the 16 passed as parameters,
  ;; so it arrives in memory: call-id at 0, root-call-id at 8, tool at 16,
  ;; mode at 24, option<agent> at 28 (36 bytes), nested at 64.
  (func (export "resolve") (param $execution i32) (result i32)
    ;; (DSH_CONTRACT_NESTED, yes|no) at 640
    (i32.store (i32.const 640) (i32.const 288))
    (i32.store (i32.const 644) (i32.const 19))
    (if (i32.load8_u offset=64 (local.get $execution))
      (then
        (i32.store (i32.const 648) (i32.const 496))
        (i32.store (i32.const 652) (i32.const 3)))
      (else
        (i32.store (i32.const 648) (i32.const 500))
        (i32.store (i32.const 652) (i32.const 2))))
    ;; (DSH_CONTRACT_TOOL, tool) at 656: the tool string, where the host put it
    (i32.store (i32.const 656) (i32.const 400))
    (i32.store (i32.const 660) (i32.const 17))
    (i32.store (i32.const 664) (i32.load offset=16 (local.get $execution)))
    (i32.store (i32.const 668) (i32.load offset=20 (local.get $execution)))
    ;; result::ok([both pairs])
    (i32.store8 (i32.const 704) (i32.const 0))
    (i32.store (i32.const 708) (i32.const 640))
    (i32.store (i32.const 712) (i32.const 2))
    (i32.const 704))

  ;; A bump allocator: enough for one call's arguments.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p)))
