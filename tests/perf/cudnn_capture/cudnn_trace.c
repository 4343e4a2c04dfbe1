/*
 * Records every cuDNN backend call a program makes (create, set attribute, finalize, get
 * attribute, destroy) in the order it makes them, one call a line, each descriptor named by
 * the order of its creation (@1, @2, ...) instead of its address, so that a descriptor an
 * attribute refers to can be followed. Loaded with LD_PRELOAD in front of libcudnn; each call
 * goes on to the real library (dlsym RTLD_NEXT) and its status is recorded with it.
 *
 * Output ($CUDNN_TRACE_FILE, else stderr), numbers as the header defines them:
 *   create @ID TYPE STATUS
 *   set @ID ATTRIBUTE ATTRIBUTE_TYPE COUNT VALUE... STATUS=S
 *   get @ID ATTRIBUTE ATTRIBUTE_TYPE REQUESTED STATUS=S
 *   finalize @ID STATUS
 *   destroy @ID STATUS
 * Values: integers and enumerators as decimal numbers, booleans 0/1, floats with enough digits
 * to read back exactly, descriptors as @ID (@? for one this trace did not see created),
 * fractions as N/D, handles and pointers as "ptr" (their value is noise), characters quoted.
 */
#define _GNU_SOURCE
#include <cudnn_graph.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *ptr;
    long id;
} trace_entry_t;

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_out;
static trace_entry_t *trace_entries;
static size_t trace_count, trace_cap;
static long trace_next_id = 1;

static FILE *trace_file(void)
{
    if (!trace_out) {
        const char *path = getenv("CUDNN_TRACE_FILE");
        trace_out = path ? fopen(path, "w") : NULL;
        if (!trace_out) trace_out = stderr;
        setvbuf(trace_out, NULL, _IOLBF, 0);
    }
    return trace_out;
}

static void *trace_next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "cudnn_trace: %s not found after the trace library\n", name);
        abort();
    }
    return f;
}

/* The live descriptor at this address (the newest one, addresses are reused), or 0. */
static long trace_lookup(const void *ptr)
{
    for (size_t i = trace_count; i-- > 0;)
        if (trace_entries[i].ptr == ptr) return trace_entries[i].id;
    return 0;
}

static long trace_add(const void *ptr)
{
    if (trace_count == trace_cap) {
        size_t cap = trace_cap ? 2 * trace_cap : 256;
        trace_entry_t *e = realloc(trace_entries, cap * sizeof *e);
        if (!e) abort();
        trace_entries = e;
        trace_cap = cap;
    }
    trace_entries[trace_count].ptr = ptr;
    trace_entries[trace_count].id = trace_next_id;
    trace_count++;
    return trace_next_id++;
}

static void trace_forget(const void *ptr)
{
    for (size_t i = trace_count; i-- > 0;)
        if (trace_entries[i].ptr == ptr) {
            trace_entries[i].ptr = NULL;
            return;
        }
}

static void trace_desc(FILE *f, const void *ptr)
{
    long id = trace_lookup(ptr);
    if (id)
        fprintf(f, " @%ld", id);
    else
        fprintf(f, " @?");
}

static void trace_values(FILE *f, cudnnBackendAttributeType_t type, int64_t count,
                         const void *values)
{
    for (int64_t i = 0; i < count; i++) {
        switch (type) {
        case CUDNN_TYPE_HANDLE:
        case CUDNN_TYPE_VOID_PTR:
            fprintf(f, " ptr");
            break;
        case CUDNN_TYPE_BOOLEAN:
            fprintf(f, " %d", ((const bool *)values)[i] ? 1 : 0);
            break;
        case CUDNN_TYPE_INT64:
            fprintf(f, " %" PRId64, ((const int64_t *)values)[i]);
            break;
        case CUDNN_TYPE_FLOAT:
            fprintf(f, " %.9g", (double)((const float *)values)[i]);
            break;
        case CUDNN_TYPE_DOUBLE:
            fprintf(f, " %.17g", ((const double *)values)[i]);
            break;
        case CUDNN_TYPE_BACKEND_DESCRIPTOR:
            trace_desc(f, ((const cudnnBackendDescriptor_t *)values)[i]);
            break;
        case CUDNN_TYPE_CHAR:
            if (i == 0) fprintf(f, " \"%.*s\"", (int)count, (const char *)values);
            return;
        case CUDNN_TYPE_FRACTION:
            fprintf(f, " %" PRId64 "/%" PRId64, ((const cudnnFraction_t *)values)[i].numerator,
                    ((const cudnnFraction_t *)values)[i].denominator);
            break;
        default: /* every other attribute type is an enumerator or an int32 */
            fprintf(f, " %d", ((const int32_t *)values)[i]);
            break;
        }
    }
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t *desc)
{
    static cudnnStatus_t (*real)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    if (!real) real = trace_next("cudnnBackendCreateDescriptor");
    cudnnStatus_t s = real(type, desc);
    pthread_mutex_lock(&trace_lock);
    FILE *f = trace_file();
    long id = (s == CUDNN_STATUS_SUCCESS && desc) ? trace_add(*desc) : 0;
    fprintf(f, "create @%ld %d %d\n", id, (int)type, (int)s);
    pthread_mutex_unlock(&trace_lock);
    return s;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void *values)
{
    static cudnnStatus_t (*real)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                 cudnnBackendAttributeType_t, int64_t, const void *);
    if (!real) real = trace_next("cudnnBackendSetAttribute");
    cudnnStatus_t s = real(desc, name, type, count, values);
    pthread_mutex_lock(&trace_lock);
    FILE *f = trace_file();
    fprintf(f, "set");
    trace_desc(f, desc);
    fprintf(f, " %d %d %" PRId64, (int)name, (int)type, count);
    if (values) trace_values(f, type, count, values);
    fprintf(f, " STATUS=%d\n", (int)s);
    pthread_mutex_unlock(&trace_lock);
    return s;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t *count, void *values)
{
    static cudnnStatus_t (*real)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                 cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    if (!real) real = trace_next("cudnnBackendGetAttribute");
    cudnnStatus_t s = real(desc, name, type, requested, count, values);
    pthread_mutex_lock(&trace_lock);
    FILE *f = trace_file();
    fprintf(f, "get");
    trace_desc(f, desc);
    fprintf(f, " %d %d %" PRId64 " STATUS=%d\n", (int)name, (int)type, requested, (int)s);
    pthread_mutex_unlock(&trace_lock);
    return s;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc)
{
    static cudnnStatus_t (*real)(cudnnBackendDescriptor_t);
    if (!real) real = trace_next("cudnnBackendFinalize");
    cudnnStatus_t s = real(desc);
    pthread_mutex_lock(&trace_lock);
    FILE *f = trace_file();
    fprintf(f, "finalize");
    trace_desc(f, desc);
    fprintf(f, " %d\n", (int)s);
    pthread_mutex_unlock(&trace_lock);
    return s;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc)
{
    static cudnnStatus_t (*real)(cudnnBackendDescriptor_t);
    if (!real) real = trace_next("cudnnBackendDestroyDescriptor");
    pthread_mutex_lock(&trace_lock);
    long id = trace_lookup(desc);
    trace_forget(desc);
    pthread_mutex_unlock(&trace_lock);
    cudnnStatus_t s = real(desc);
    pthread_mutex_lock(&trace_lock);
    if (id)
        fprintf(trace_file(), "destroy @%ld %d\n", id, (int)s);
    else
        fprintf(trace_file(), "destroy @? %d\n", (int)s);
    pthread_mutex_unlock(&trace_lock);
    return s;
}
