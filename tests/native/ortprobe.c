/*
 * ortprobe: a tiny native Windows program that proves which onnxruntime.dll a process really gets
 * and that it runs our models.
 *
 * Written for ort-bundler's Windows test tier (run under Wine). It loads the DLL *by name*, so the
 * standard DLL search order -- and therefore the launcher's set-up -- decides which copy is found.
 * ORT's own header is deliberately not used: OrtApi is a table of function pointers that ORT only
 * ever appends to, so the few functions we need are called by their slot index (docs/facts.md section 7).
 *
 * Usage: ortprobe.exe [--dll NAME] [--expect-version V] [--dump DIR] [--echo-args] [--echo-env NAME]...
 *                     [--exit N] [[--shape INPUT=D0,D1,...]... [--check-identity] MODEL]...
 * --shape and --check-identity apply to the MODEL that follows them; the other options to the run.
 *
 * Output (stdout, one fact per line, UTF-8):
 *   arg <i>: [<argv[i]>]                               (with --echo-args, before anything else)
 *   env <NAME>: <value> | env <NAME> unset             (with --echo-env NAME)
 *   module: <full path of the loaded DLL>
 *   version: <OrtGetApiBase()->GetVersionString()>
 *   model: <path>                                      (per model, in argument order)
 *   input <name> shape [d0,d1,...] sha256 <hex>        (per input fed, raw little-endian bytes)
 *   output <name> shape [d0,d1,...] sha256 <hex>       (per output, raw little-endian bytes)
 *   identity: exact | identity: differs                (with --check-identity)
 * Errors go to stderr as "error: ..." lines.
 *
 * Inputs are filled exactly as ort-bundler's build fills them when it records a model's reference
 * output (bundler/shipped/ort_bundle/synth.py), so the digests can be compared with bundle.json: every input must
 * be a float tensor; its shape is the --shape given for it, else the declared one with dynamic
 * dimensions as 1; element i of each input (i restarting at 0 for every input) is
 * ((h(i) % 251) - 125) / 16.0f, which is exact in float32, with h the seeded 32-bit hash of
 * synth.element_hash (murmur3's finaliser over i + 0x5EED0001).
 *
 * Exit codes: 0 ok, 2 usage (including a --shape that does not fit the model), 3 LoadLibrary failed,
 * 4 OrtGetApiBase/GetApi failed, 5 session creation failed (including an unreadable model file),
 * 6 run failed, 7 identity mismatch, 8 model uses a type the probe does not support, 9 version
 * differs from --expect-version. With --exit N the probe exits N right after echoing its arguments
 * and environment, without loading anything, so launcher tests can check that an entry point's exit
 * code comes back.
 */

#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

enum {
    EXIT_OK = 0,
    EXIT_USAGE = 2,
    EXIT_LOAD = 3,
    EXIT_API = 4,
    EXIT_SESSION = 5,
    EXIT_RUN = 6,
    EXIT_IDENTITY = 7,
    EXIT_UNSUPPORTED = 8,
    EXIT_VERSION = 9,
};

/* ---------------------------------------------------------------- SHA-256 (FIPS 180-4) */

typedef struct {
    uint32_t state[8];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} Sha256;

static const uint32_t SHA256_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_compress(Sha256 *h, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h->state[0], b = h->state[1], c = h->state[2], d = h->state[3];
    uint32_t e = h->state[4], f = h->state[5], g = h->state[6], k = h->state[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h->state[0] += a; h->state[1] += b; h->state[2] += c; h->state[3] += d;
    h->state[4] += e; h->state[5] += f; h->state[6] += g; h->state[7] += k;
}

static void sha256_init(Sha256 *h) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(h->state, iv, sizeof iv);
    h->length = 0;
    h->used = 0;
}

static void sha256_update(Sha256 *h, const void *data, size_t n) {
    const uint8_t *p = data;
    h->length += n;
    while (n > 0) {
        size_t take = 64 - h->used < n ? 64 - h->used : n;
        memcpy(h->block + h->used, p, take);
        h->used += take;
        p += take;
        n -= take;
        if (h->used == 64) {
            sha256_compress(h, h->block);
            h->used = 0;
        }
    }
}

static void sha256_hex(Sha256 *h, char out[65]) {
    uint64_t bits = h->length * 8;
    uint8_t pad = 0x80, zero = 0, len[8];
    sha256_update(h, &pad, 1);
    while (h->used != 56)
        sha256_update(h, &zero, 1);
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(h, len, 8);
    for (int i = 0; i < 8; i++)
        snprintf(out + 8 * i, 9, "%08x", h->state[i]);
}

/* ---------------------------------------------------------------- the OrtApi slots we call */

/* Slot numbers count the members of struct OrtApi from the top of onnxruntime_c_api.h; all of
 * them belong to version 1 of the table, so GetApi(1) serves every ORT release, decoys included.
 * Each was checked by calling it on the real 1.23.1 DLL (tests/test_wine_probe.py). */
enum {
    SLOT_GET_ERROR_MESSAGE = 2,
    SLOT_CREATE_ENV = 3,
    SLOT_CREATE_SESSION_FROM_ARRAY = 8,
    SLOT_RUN = 9,
    SLOT_CREATE_SESSION_OPTIONS = 10,
    SLOT_SESSION_GET_INPUT_COUNT = 30,
    SLOT_SESSION_GET_OUTPUT_COUNT = 31,
    SLOT_SESSION_GET_INPUT_TYPE_INFO = 33,
    SLOT_SESSION_GET_INPUT_NAME = 36,
    SLOT_SESSION_GET_OUTPUT_NAME = 37,
    SLOT_CREATE_TENSOR_WITH_DATA_AS_ORT_VALUE = 49,
    SLOT_GET_TENSOR_MUTABLE_DATA = 51,
    SLOT_CAST_TYPE_INFO_TO_TENSOR_INFO = 55,
    SLOT_GET_TENSOR_ELEMENT_TYPE = 60,
    SLOT_GET_DIMENSIONS_COUNT = 61,
    SLOT_GET_DIMENSIONS = 62,
    SLOT_GET_TENSOR_SHAPE_ELEMENT_COUNT = 64,
    SLOT_GET_TENSOR_TYPE_AND_SHAPE = 65,
    SLOT_CREATE_CPU_MEMORY_INFO = 69,
    SLOT_ALLOCATOR_FREE = 76,
    SLOT_GET_ALLOCATOR_WITH_DEFAULT_OPTIONS = 78,
    SLOT_RELEASE_ENV = 92,
    SLOT_RELEASE_STATUS = 93,
    SLOT_RELEASE_MEMORY_INFO = 94,
    SLOT_RELEASE_SESSION = 95,
    SLOT_RELEASE_VALUE = 96,
    SLOT_RELEASE_TYPE_INFO = 98,
    SLOT_RELEASE_TENSOR_TYPE_AND_SHAPE_INFO = 99,
    SLOT_RELEASE_SESSION_OPTIONS = 100,
};

enum { ORT_API_VERSION_USED = 1, ORT_LOGGING_LEVEL_WARNING = 2, ORT_ARENA_ALLOCATOR = 1, ORT_MEM_TYPE_DEFAULT = 0 };
enum { ELEMENT_FLOAT = 1, ELEMENT_STRING = 8 };

/* Every ORT object is opaque to us. */
typedef void Obj;
typedef Obj *Status; /* NULL means success */

typedef struct {
    const void *(*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;

typedef const char *(*FnErrorMessage)(Status);
typedef Status (*FnCreateEnv)(int level, const char *logid, Obj **env);
typedef Status (*FnCreateSessionFromArray)(Obj *env, const void *data, size_t len, Obj *options, Obj **session);
typedef Status (*FnRun)(Obj *session, Obj *run_options, const char *const *input_names, Obj *const *inputs,
                        size_t n_inputs, const char *const *output_names, size_t n_outputs, Obj **outputs);
typedef Status (*FnOut)(Obj **out);
typedef Status (*FnCount)(const Obj *owner, size_t *out);
typedef Status (*FnTypeInfoAt)(const Obj *session, size_t index, Obj **type_info);
typedef Status (*FnNameAt)(const Obj *session, size_t index, Obj *allocator, char **out);
typedef Status (*FnCreateTensor)(const Obj *info, void *data, size_t bytes, const int64_t *shape, size_t rank,
                                 int element_type, Obj **out);
typedef Status (*FnMutableData)(Obj *value, void **out);
typedef Status (*FnCastToTensorInfo)(const Obj *type_info, const Obj **out);
typedef Status (*FnElementType)(const Obj *info, int *out);
typedef Status (*FnDimensions)(const Obj *info, int64_t *dims, size_t rank);
typedef Status (*FnTypeAndShape)(const Obj *value, Obj **out);
typedef Status (*FnCpuMemoryInfo)(int allocator_type, int mem_type, Obj **out);
typedef Status (*FnAllocatorFree)(Obj *allocator, void *p);
typedef void (*FnRelease)(Obj *object);

static const void *const *g_api;

#define API(type, slot) ((type)g_api[slot])

/* ---------------------------------------------------------------- reporting */

static char *to_utf8(const wchar_t *text) {
    int n = WideCharToMultiByte(CP_UTF8, 0, text, -1, NULL, 0, NULL, NULL);
    char *out = calloc((size_t)n + 1, 1);
    WideCharToMultiByte(CP_UTF8, 0, text, -1, out, n, NULL, NULL);
    return out;
}

static void print_utf8(const char *prefix, const wchar_t *text, const char *suffix) {
    char *utf8 = to_utf8(text);
    printf("%s%s%s", prefix, utf8, suffix);
    free(utf8);
}

__attribute__((noreturn, format(printf, 2, 3))) static void fail(int code, const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs("error: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(code);
}

/* Turns a non-NULL OrtStatus into our exit code, carrying ORT's own message. */
static void check(Status status, int code, const char *what) {
    if (status == NULL)
        return;
    const char *message = API(FnErrorMessage, SLOT_GET_ERROR_MESSAGE)(status);
    fprintf(stderr, "error: %s failed: %s\n", what, message);
    API(FnRelease, SLOT_RELEASE_STATUS)(status);
    exit(code);
}

/* ---------------------------------------------------------------- loading */

static const char *load_ort(const wchar_t *dll_name) {
    HMODULE module = LoadLibraryW(dll_name);
    if (module == NULL) {
        DWORD error = GetLastError();
        fail(EXIT_LOAD, "LoadLibraryW(%s) failed: GetLastError %lu", to_utf8(dll_name), (unsigned long)error);
    }
    wchar_t path[32768];
    DWORD length = GetModuleFileNameW(module, path, (DWORD)(sizeof path / sizeof path[0]));
    if (length == 0)
        fail(EXIT_LOAD, "GetModuleFileNameW failed: GetLastError %lu", (unsigned long)GetLastError());
    print_utf8("module: ", path, "\n");

    typedef const OrtApiBase *(*FnGetApiBase)(void);
    FnGetApiBase get_api_base = (FnGetApiBase)(void (*)(void))GetProcAddress(module, "OrtGetApiBase");
    if (get_api_base == NULL)
        fail(EXIT_API, "the loaded DLL exports no OrtGetApiBase: GetLastError %lu", (unsigned long)GetLastError());
    const OrtApiBase *base = get_api_base();
    const char *version = base->GetVersionString();
    printf("version: %s\n", version);
    g_api = base->GetApi(ORT_API_VERSION_USED);
    if (g_api == NULL)
        fail(EXIT_API, "OrtGetApiBase()->GetApi(%d) returned NULL", ORT_API_VERSION_USED);
    return version;
}

/* ---------------------------------------------------------------- one model */

typedef struct {
    size_t count;
    char **names;
    Obj **values;
    float **buffers;
    size_t *elements;
} Inputs;

static char *read_model(const wchar_t *path, size_t *size) {
    HANDLE file = CreateFileW(path, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    LARGE_INTEGER length;
    if (file == INVALID_HANDLE_VALUE || !GetFileSizeEx(file, &length))
        fail(EXIT_SESSION, "cannot open the model file %s: GetLastError %lu", to_utf8(path),
             (unsigned long)GetLastError());
    char *data = malloc((size_t)length.QuadPart + 1);
    DWORD got = 0;
    if (data == NULL || !ReadFile(file, data, (DWORD)length.QuadPart, &got, NULL) || got != length.QuadPart)
        fail(EXIT_SESSION, "cannot read the model file %s: GetLastError %lu", to_utf8(path),
             (unsigned long)GetLastError());
    CloseHandle(file);
    *size = (size_t)length.QuadPart;
    return data;
}

static Obj *create_session(Obj *env, const wchar_t *path) {
    size_t size;
    char *data = read_model(path, &size);
    Obj *options = NULL, *session = NULL;
    check(API(FnOut, SLOT_CREATE_SESSION_OPTIONS)(&options), EXIT_SESSION, "CreateSessionOptions");
    check(API(FnCreateSessionFromArray, SLOT_CREATE_SESSION_FROM_ARRAY)(env, data, size, options, &session),
          EXIT_SESSION, "CreateSessionFromArray");
    API(FnRelease, SLOT_RELEASE_SESSION_OPTIONS)(options);
    free(data);
    return session;
}

/* A --shape given for one input of the next model, as the build's [[models]] shapes give it. */
typedef struct {
    char *name;
    int64_t *dims;
    size_t rank;
    int used;
} ShapeOverride;

typedef struct {
    const wchar_t *path;
    ShapeOverride *shapes;
    size_t n_shapes;
    int check_identity;
} ModelArg;

static ShapeOverride *find_shape(const ModelArg *model, const char *name) {
    for (size_t s = 0; s < model->n_shapes; s++)
        if (strcmp(model->shapes[s].name, name) == 0)
            return &model->shapes[s];
    return NULL;
}

/* Pins one input's shape: the --shape given for it (which must fit the declared shape), else the
 * declared shape with dynamic dimensions as 1 -- the rule of synth.resolve_shape. */
static void resolve_shape(const ModelArg *model, const char *name, int64_t *shape, size_t rank) {
    ShapeOverride *given = find_shape(model, name);
    if (given == NULL) {
        for (size_t d = 0; d < rank; d++)
            if (shape[d] < 0)
                shape[d] = 1;
        return;
    }
    if (given->rank != rank)
        fail(EXIT_USAGE, "--shape %s has %llu dimensions, the model's input has %llu", name,
             (unsigned long long)given->rank, (unsigned long long)rank);
    for (size_t d = 0; d < rank; d++) {
        if (shape[d] >= 0 && shape[d] != given->dims[d])
            fail(EXIT_USAGE, "--shape %s gives dimension %llu as %lld, the model declares %lld", name,
                 (unsigned long long)d, (long long)given->dims[d], (long long)shape[d]);
        shape[d] = given->dims[d];
    }
    given->used = 1;
}

/* Reads one input's declared shape and pins it (resolve_shape). */
static size_t input_shape(Obj *session, size_t index, const char *name, const ModelArg *model, int64_t **shape) {
    Obj *type_info = NULL;
    const Obj *tensor_info = NULL;
    int element_type = 0;
    size_t rank = 0;
    check(API(FnTypeInfoAt, SLOT_SESSION_GET_INPUT_TYPE_INFO)(session, index, &type_info), EXIT_SESSION,
          "SessionGetInputTypeInfo");
    check(API(FnCastToTensorInfo, SLOT_CAST_TYPE_INFO_TO_TENSOR_INFO)(type_info, &tensor_info), EXIT_SESSION,
          "CastTypeInfoToTensorInfo");
    if (tensor_info == NULL)
        fail(EXIT_UNSUPPORTED, "input %s is not a tensor; the probe only feeds float tensors", name);
    check(API(FnElementType, SLOT_GET_TENSOR_ELEMENT_TYPE)(tensor_info, &element_type), EXIT_SESSION,
          "GetTensorElementType");
    if (element_type != ELEMENT_FLOAT)
        fail(EXIT_UNSUPPORTED, "input %s has element type %d; the probe only feeds float (1)", name, element_type);
    check(API(FnCount, SLOT_GET_DIMENSIONS_COUNT)(tensor_info, &rank), EXIT_SESSION, "GetDimensionsCount");
    *shape = calloc(rank + 1, sizeof **shape);
    check(API(FnDimensions, SLOT_GET_DIMENSIONS)(tensor_info, *shape, rank), EXIT_SESSION, "GetDimensions");
    resolve_shape(model, name, *shape, rank);
    API(FnRelease, SLOT_RELEASE_TYPE_INFO)(type_info);
    return rank;
}

static float deterministic_value(size_t i) {
    uint32_t h = (uint32_t)((uint64_t)i + 0x5EED0001u); /* synth.element_hash: murmur3's finaliser over i + seed */
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return (float)((int)(h % 251u) - 125) / 16.0f;
}

/* One "<kind> <name> shape [d0,...] sha256 <hex>" line; the digest is over the raw little-endian bytes,
 * so it equals synth.output_digest of the same numpy array. */
static void print_tensor(const char *kind, const char *name, const int64_t *shape, size_t rank, const void *data,
                         size_t bytes) {
    Sha256 hash;
    char hex[65];
    sha256_init(&hash);
    sha256_update(&hash, data, bytes);
    sha256_hex(&hash, hex);
    printf("%s %s shape [", kind, name);
    for (size_t d = 0; d < rank; d++)
        printf(d ? ",%lld" : "%lld", (long long)shape[d]);
    printf("] sha256 %s\n", hex);
}

static Inputs make_inputs(Obj *session, Obj *allocator, Obj *memory_info, const ModelArg *model) {
    Inputs in = {0};
    check(API(FnCount, SLOT_SESSION_GET_INPUT_COUNT)(session, &in.count), EXIT_SESSION, "SessionGetInputCount");
    in.names = calloc(in.count + 1, sizeof *in.names);
    in.values = calloc(in.count + 1, sizeof *in.values);
    in.buffers = calloc(in.count + 1, sizeof *in.buffers);
    in.elements = calloc(in.count + 1, sizeof *in.elements);
    for (size_t i = 0; i < in.count; i++) {
        check(API(FnNameAt, SLOT_SESSION_GET_INPUT_NAME)(session, i, allocator, &in.names[i]), EXIT_SESSION,
              "SessionGetInputName");
        int64_t *shape = NULL;
        size_t rank = input_shape(session, i, in.names[i], model, &shape);
        size_t n = 1;
        for (size_t d = 0; d < rank; d++)
            n *= (size_t)shape[d];
        in.elements[i] = n;
        in.buffers[i] = malloc((n + 1) * sizeof(float));
        for (size_t e = 0; e < n; e++)
            in.buffers[i][e] = deterministic_value(e);
        print_tensor("input", in.names[i], shape, rank, in.buffers[i], n * sizeof(float));
        check(API(FnCreateTensor, SLOT_CREATE_TENSOR_WITH_DATA_AS_ORT_VALUE)(
                  memory_info, in.buffers[i], n * sizeof(float), shape, rank, ELEMENT_FLOAT, &in.values[i]),
              EXIT_RUN, "CreateTensorWithDataAsOrtValue");
        free(shape);
    }
    for (size_t s = 0; s < model->n_shapes; s++)
        if (!model->shapes[s].used)
            fail(EXIT_USAGE, "--shape %s names no input of the model", model->shapes[s].name);
    return in;
}

static void release_inputs(Inputs *in, Obj *allocator) {
    for (size_t i = 0; i < in->count; i++) {
        API(FnRelease, SLOT_RELEASE_VALUE)(in->values[i]);
        API(FnAllocatorFree, SLOT_ALLOCATOR_FREE)(allocator, in->names[i]);
        free(in->buffers[i]);
    }
    free(in->names);
    free(in->values);
    free(in->buffers);
    free(in->elements);
}

/* Bytes per element for the fixed-width ONNX element types; 0 for those we cannot hash as raw bytes
 * (strings, packed 4-bit types, anything newer than this table). */
static size_t element_size(int element_type) {
    static const size_t sizes[] = {0, 4, 1, 1, 2, 2, 4, 8, 0, 1, 2, 8, 4, 8, 8, 16, 2, 1, 1, 1, 1};
    return element_type > 0 && element_type < (int)(sizeof sizes / sizeof sizes[0]) ? sizes[element_type] : 0;
}

typedef struct {
    const void *data;
    size_t bytes;
    int element_type;
} OutputData;

/* Prints one output's shape and digest (print_tensor) and dumps its raw bytes when asked. */
static OutputData report_output(Obj *value, const char *name, const wchar_t *dump_path) {
    Obj *info = NULL;
    OutputData out = {0};
    size_t rank = 0, elements = 0;
    check(API(FnTypeAndShape, SLOT_GET_TENSOR_TYPE_AND_SHAPE)(value, &info), EXIT_UNSUPPORTED,
          "GetTensorTypeAndShape (the output must be a tensor)");
    check(API(FnElementType, SLOT_GET_TENSOR_ELEMENT_TYPE)(info, &out.element_type), EXIT_RUN, "GetTensorElementType");
    check(API(FnCount, SLOT_GET_DIMENSIONS_COUNT)(info, &rank), EXIT_RUN, "GetDimensionsCount");
    int64_t *shape = calloc(rank + 1, sizeof *shape);
    check(API(FnDimensions, SLOT_GET_DIMENSIONS)(info, shape, rank), EXIT_RUN, "GetDimensions");
    check(API(FnCount, SLOT_GET_TENSOR_SHAPE_ELEMENT_COUNT)(info, &elements), EXIT_RUN, "GetTensorShapeElementCount");
    API(FnRelease, SLOT_RELEASE_TENSOR_TYPE_AND_SHAPE_INFO)(info);
    size_t size = element_size(out.element_type);
    if (size == 0)
        fail(EXIT_UNSUPPORTED, "output %s has element type %d, which the probe cannot digest", name, out.element_type);
    void *data = NULL;
    check(API(FnMutableData, SLOT_GET_TENSOR_MUTABLE_DATA)(value, &data), EXIT_RUN, "GetTensorMutableData");
    out.data = data;
    out.bytes = elements * size;

    print_tensor("output", name, shape, rank, out.data, out.bytes);
    free(shape);

    if (dump_path != NULL) {
        FILE *file = _wfopen(dump_path, L"wb");
        if (file == NULL || fwrite(out.data, 1, out.bytes, file) != out.bytes || fclose(file) != 0)
            fail(EXIT_RUN, "cannot write the output dump for %s", name);
    }
    return out;
}

typedef struct {
    const wchar_t *dll;
    const char *expect_version;
    const wchar_t *dump_dir;
} Options;

static int check_identity(const Inputs *in, const OutputData *outputs, size_t n_outputs) {
    if (in->count != 1 || n_outputs != 1)
        fail(EXIT_USAGE, "--check-identity needs one input and one output, the model has %llu and %llu",
             (unsigned long long)in->count, (unsigned long long)n_outputs);
    int exact = outputs[0].element_type == ELEMENT_FLOAT && outputs[0].bytes == in->elements[0] * sizeof(float) &&
                memcmp(outputs[0].data, in->buffers[0], outputs[0].bytes) == 0;
    printf("identity: %s\n", exact ? "exact" : "differs");
    return exact ? EXIT_OK : EXIT_IDENTITY;
}

static int run_model(Obj *env, const ModelArg *model, size_t model_index, const Options *options) {
    print_utf8("model: ", model->path, "\n");
    Obj *session = create_session(env, model->path);
    Obj *allocator = NULL, *memory_info = NULL;
    check(API(FnOut, SLOT_GET_ALLOCATOR_WITH_DEFAULT_OPTIONS)(&allocator), EXIT_SESSION, "GetAllocatorWithDefaultOptions");
    check(API(FnCpuMemoryInfo, SLOT_CREATE_CPU_MEMORY_INFO)(ORT_ARENA_ALLOCATOR, ORT_MEM_TYPE_DEFAULT, &memory_info),
          EXIT_RUN, "CreateCpuMemoryInfo");
    Inputs in = make_inputs(session, allocator, memory_info, model);

    size_t n_outputs = 0;
    check(API(FnCount, SLOT_SESSION_GET_OUTPUT_COUNT)(session, &n_outputs), EXIT_SESSION, "SessionGetOutputCount");
    char **output_names = calloc(n_outputs + 1, sizeof *output_names);
    Obj **output_values = calloc(n_outputs + 1, sizeof *output_values);
    OutputData *outputs = calloc(n_outputs + 1, sizeof *outputs);
    for (size_t o = 0; o < n_outputs; o++)
        check(API(FnNameAt, SLOT_SESSION_GET_OUTPUT_NAME)(session, o, allocator, &output_names[o]), EXIT_SESSION,
              "SessionGetOutputName");
    check(API(FnRun, SLOT_RUN)(session, NULL, (const char *const *)in.names, in.values, in.count,
                               (const char *const *)output_names, n_outputs, output_values),
          EXIT_RUN, "Run");

    for (size_t o = 0; o < n_outputs; o++) {
        wchar_t dump_path[32768] = {0};
        if (options->dump_dir != NULL)
            _snwprintf(dump_path, sizeof dump_path / sizeof dump_path[0] - 1, L"%ls\\%llu_%llu.bin",
                       options->dump_dir, (unsigned long long)model_index, (unsigned long long)o);
        outputs[o] = report_output(output_values[o], output_names[o], options->dump_dir ? dump_path : NULL);
    }
    int code = model->check_identity ? check_identity(&in, outputs, n_outputs) : EXIT_OK;

    for (size_t o = 0; o < n_outputs; o++) {
        API(FnRelease, SLOT_RELEASE_VALUE)(output_values[o]);
        API(FnAllocatorFree, SLOT_ALLOCATOR_FREE)(allocator, output_names[o]);
    }
    free(outputs);
    free(output_values);
    free(output_names);
    release_inputs(&in, allocator);
    API(FnRelease, SLOT_RELEASE_MEMORY_INFO)(memory_info);
    API(FnRelease, SLOT_RELEASE_SESSION)(session);
    return code;
}

/* ---------------------------------------------------------------- command line */

static int usage(const char *problem) {
    fprintf(stderr, "error: %s\nusage: ortprobe.exe [--dll NAME] [--expect-version V] [--dump DIR] [--echo-args] "
                    "[--echo-env NAME]... [--exit N] [[--shape INPUT=D0,D1,...]... [--check-identity] MODEL]...\n",
            problem);
    return EXIT_USAGE;
}

/* "INPUT=D0,D1,..." with every dimension a positive integer; NULL name on a malformed value. */
static ShapeOverride parse_shape(const wchar_t *text) {
    ShapeOverride shape = {0};
    char *utf8 = to_utf8(text);
    char *equals = strchr(utf8, '=');
    if (equals == NULL || equals == utf8 || equals[1] == '\0')
        return shape;
    *equals = '\0';
    size_t commas = 0;
    for (const char *c = equals + 1; *c; c++)
        commas += *c == ',';
    int64_t *dims = calloc(commas + 1, sizeof *dims);
    const char *cursor = equals + 1;
    for (size_t d = 0; d <= commas; d++) {
        char *end = NULL;
        long long value = strtoll(cursor, &end, 10);
        if (end == cursor || value < 1 || (*end != ',' && *end != '\0'))
            return shape;
        dims[d] = value;
        cursor = end + 1;
    }
    shape.name = utf8;
    shape.dims = dims;
    shape.rank = commas + 1;
    return shape;
}

static void echo_env(const wchar_t *name) {
    const wchar_t *value = _wgetenv(name);
    print_utf8("env ", name, value ? ": " : " unset\n");
    if (value)
        print_utf8("", value, "\n");
}

int wmain(int argc, wchar_t **argv) {
    /* Unbuffered, so a crash inside ORT still leaves every line printed so far. */
    setvbuf(stdout, NULL, _IONBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);

    Options options = {.dll = L"onnxruntime.dll"};
    ModelArg *models = calloc((size_t)argc + 1, sizeof *models);
    size_t n_models = 0;
    ModelArg next = {.shapes = calloc((size_t)argc + 1, sizeof(ShapeOverride))};
    int exit_early = 0, exit_code = 0;
    for (int i = 1; i < argc; i++)
        if (wcscmp(argv[i], L"--echo-args") == 0)
            for (int a = 1; a < argc; a++) {
                printf("arg %d: ", a);
                print_utf8("[", argv[a], "]\n");
            }
    for (int i = 1; i < argc; i++) {
        int has_value = i + 1 < argc;
        if (wcscmp(argv[i], L"--echo-args") == 0) {
            continue;
        } else if (wcscmp(argv[i], L"--echo-env") == 0 && has_value) {
            echo_env(argv[++i]);
        } else if (wcscmp(argv[i], L"--check-identity") == 0) {
            next.check_identity = 1;
        } else if (wcscmp(argv[i], L"--shape") == 0 && has_value) {
            ShapeOverride shape = parse_shape(argv[++i]);
            if (shape.name == NULL)
                return usage("--shape needs INPUT=D0,D1,... with positive dimensions");
            next.shapes[next.n_shapes++] = shape;
        } else if (wcscmp(argv[i], L"--dll") == 0 && has_value) {
            options.dll = argv[++i];
        } else if (wcscmp(argv[i], L"--expect-version") == 0 && has_value) {
            options.expect_version = to_utf8(argv[++i]);
        } else if (wcscmp(argv[i], L"--dump") == 0 && has_value) {
            options.dump_dir = argv[++i];
        } else if (wcscmp(argv[i], L"--exit") == 0 && has_value) {
            exit_early = 1;
            exit_code = _wtoi(argv[++i]);
        } else if (wcsncmp(argv[i], L"--", 2) == 0) {
            return usage("unknown option or option without its value");
        } else {
            next.path = argv[i];
            models[n_models++] = next;
            next = (ModelArg){.shapes = calloc((size_t)argc + 1, sizeof(ShapeOverride))};
        }
    }
    if (exit_early)
        return exit_code;
    if (next.n_shapes > 0 || next.check_identity)
        return usage("--shape and --check-identity must be followed by the MODEL they apply to");
    if (n_models == 0)
        return usage("no model given");

    const char *version = load_ort(options.dll);
    if (options.expect_version != NULL && strcmp(version, options.expect_version) != 0)
        fail(EXIT_VERSION, "loaded ONNX Runtime %s, expected %s", version, options.expect_version);

    Obj *env = NULL;
    check(API(FnCreateEnv, SLOT_CREATE_ENV)(ORT_LOGGING_LEVEL_WARNING, "ortprobe", &env), EXIT_SESSION, "CreateEnv");
    int code = EXIT_OK;
    for (size_t m = 0; m < n_models && code == EXIT_OK; m++)
        code = run_model(env, &models[m], m, &options);
    API(FnRelease, SLOT_RELEASE_ENV)(env);
    return code;
}
