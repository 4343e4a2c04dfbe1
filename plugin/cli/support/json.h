/* The tools' one JSON writer: an object per line, nested objects and arrays, strings
 * escaped (quotes, backslashes, control characters), and null for what is unknown (a NULL
 * string, a non-finite number). */
#ifndef DCPT_CLI_JSON_H
#define DCPT_CLI_JSON_H

#include <stdint.h>
#include <stdio.h>

#define DCPT_JSON_DEPTH 8 /* containers open at once, the outer object included */

typedef struct {
    FILE *f;
    int depth;                   /* open containers, the outer object included */
    int count[DCPT_JSON_DEPTH];  /* members written in each open container */
    char close[DCPT_JSON_DEPTH]; /* '}' or ']' */
} dcpt_json_t;

/* Opens the line's outer object. */
void dcpt_json_begin(dcpt_json_t *j, FILE *f);
/* Members: `key` names them inside an object; inside an array it must be NULL. */
void dcpt_json_str(dcpt_json_t *j, const char *key, const char *value); /* NULL: null */
void dcpt_json_int(dcpt_json_t *j, const char *key, int64_t value);
void dcpt_json_num(dcpt_json_t *j, const char *key, double value); /* non-finite: null */
void dcpt_json_bool(dcpt_json_t *j, const char *key, int value);
void dcpt_json_null(dcpt_json_t *j, const char *key);
/* Nested containers, closed by dcpt_json_close() (innermost first). */
void dcpt_json_object(dcpt_json_t *j, const char *key);
void dcpt_json_array(dcpt_json_t *j, const char *key);
void dcpt_json_close(dcpt_json_t *j);
/* Closes whatever is open and ends the line. */
void dcpt_json_end(dcpt_json_t *j);

/* `s` as a JSON string literal, quotes included. */
void dcpt_json_quote(FILE *f, const char *s);

#endif
