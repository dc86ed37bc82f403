// `{{name}}`: a dsh-env contributor. `declare` names every key it may set;
// `resolve` returns their values for one tool call, in a fresh sandboxed
// instance each time.
//
// `gen/contributor.h` comes from `dsh-env bindgen c gen`. Its ownership rules:
// - an export owns its arguments and frees them (`*_free`);
// - everything it returns must be heap memory (the generated post-return
//   functions free it), hence `contributor_string_dup`, `copy` and `malloc`.

#include <stdlib.h>
#include <string.h>

#include "contributor.h"

#define KEY "{{key}}"

// A heap copy of `from` (which need not end in a NUL byte).
static void copy(contributor_string_t *to, const contributor_string_t *from) {
    to->ptr = malloc(from->len ? from->len : 1);
    if (to->ptr == NULL) {
        abort();
    }
    memcpy(to->ptr, from->ptr, from->len);
    to->len = from->len;
}

void exports_contributor_declare(contributor_declaration_t *ret) {
    contributor_string_dup(&ret->name, "{{name}}");
    ret->keys.len = 1;
    ret->keys.ptr = malloc(sizeof(dsh_env_types_key_declaration_t));
    if (ret->keys.ptr == NULL) {
        abort();
    }
    contributor_string_dup(&ret->keys.ptr[0].key, KEY);
    contributor_string_dup(&ret->keys.ptr[0].description, "The tool this call runs, e.g. bash.");
}

// Returning false fails the call with the message in `err`; a key left out
// is absent.
bool exports_contributor_resolve(contributor_execution_t *execution, contributor_list_tuple2_string_string_t *ret,
                                 contributor_string_t *err) {
    ret->ptr = malloc(sizeof(contributor_tuple2_string_string_t));
    if (ret->ptr == NULL) {
        abort();
    }
    ret->len = 1;
    contributor_string_dup(&ret->ptr[0].f0, KEY);
    copy(&ret->ptr[0].f1, &execution->tool);
    contributor_execution_free(execution);
    return true;
}
