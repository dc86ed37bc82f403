// `{{name}}`: a dsh-env contributor. `declare` names every key it may set;
// `resolve` returns their values for one tool call, in a fresh sandboxed
// instance each time.
//
// `gen/contributor.h` comes from `dsh-env bindgen c gen`. Its ownership rules:
// - an export owns its arguments and frees them (`*_free`);
// - everything it returns must be heap memory (the generated post-return
//   functions free it), hence `contributor_string_dup`, `copy` and `malloc`.

#include <stdint.h>
#include <stdio.h>
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

// Whether the `len` bytes at `s` are UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF). Every string returned must be: the host lifts
// the whole list at once, and could not say which value was not.
static bool is_utf8(const uint8_t *s, size_t len) {
    static const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t more;
        uint32_t point;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            more = 1, point = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            more = 2, point = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            more = 3, point = c & 0x07;
        } else {
            return false;
        }
        if (len - i <= more) {
            return false;
        }
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return false;
            }
            point = (point << 6) | (s[i + k] & 0x3F);
        }
        if (point < least[more] || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF)) {
            return false;
        }
        i += more + 1;
    }
    return true;
}

// Sets `pair` to `key` and a copy of `value`. A value that is not UTF-8 is
// not set: `err` names its key, and it returns false (fail the call).
static bool set_pair(contributor_tuple2_string_string_t *pair, const char *key,
                     const contributor_string_t *value, contributor_string_t *err) {
    if (!is_utf8(value->ptr, value->len)) {
        char message[128];
        snprintf(message, sizeof message, "the value for %s is not UTF-8", key);
        contributor_string_dup(err, message);
        return false;
    }
    contributor_string_dup(&pair->f0, key);
    copy(&pair->f1, value);
    return true;
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
    // `set_pair` checks what the host would refuse without naming the key.
    bool ok = set_pair(&ret->ptr[0], KEY, &execution->tool, err);
    if (ok) {
        ret->len = 1;
    } else {
        free(ret->ptr);
        ret->ptr = NULL;
        ret->len = 0;
    }
    contributor_execution_free(execution);
    return ok;
}
