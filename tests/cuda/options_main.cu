// The cuda package's weights file and caller-owned memory, under the host emulation: a yolo26n
// package generated with --backend cuda --weights-format file (f32 or f16), built with
// tests/cuda/cuda_emu.h and linked with
// -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free,
// which routes every allocator call of the package's objects (generated code, carve runtime, and the
// emulated CUDA runtime inlined into them) and of this file through the counters below; the emulator
// itself counts cudaMalloc, cudaMallocHost and cublasCreate (carve_emu_allocs()).
//
//   cuda_options WEIGHTS_FILE
//
// Checks, each printed:
//   A. weights file: create from the path and from the caller's bytes give the same rows; a damaged
//      file is refused with its status (magic, version, truncated / padded size, CRC-32 of a flipped
//      payload byte, another checkpoint's SHA-256), a missing path with CARVE_ERR_IO, and *out is NULL;
//   B. create_with: no allocator call, no cudaMalloc / cudaMallocHost, no cublasCreate (the caller's
//      handle) in create_with, three runs (eager, capture, graph replay) and destroy; rows bit-identical
//      to create's; destroy leaves the caller's handle alive; without a handle exactly one cublasCreate;
//      smaller largest images (640x480, 16x16) with just the scratch and image bytes they need give the
//      same rows (f16 weights are rebuilt on the host in chunks of 4096 floats, whatever the buffers);
//      every bad buffer set is refused with CARVE_ERR_INVALID_ARGUMENT, also without allocating;
//      yolo26n_device_scratch_bytes() at the default image size is the header's constant (the generator
//      computes that constant in Python from the runtime's formulas).
//   C. tactics: create_with with conv_tune 1 times every convolution shape (no allocation either),
//      yolo26n_tactics returns a path per shape; a create_with given them (options.tactics) takes the same
//      paths and gives bit-identical rows; an entry that is no path is refused.
//   D. options.graph_layer_ms: the graph holds one event-record node per layer end and one at its start, its
//      rows are bit-identical to the unmarked graph's, yolo26n_layer_ms gives every layer's time after the replay.
//   E. options.attention_fused: the default (0) takes the attention layers through the GEMM path, attention_fused 1
//      through their fused launches, 8 graph nodes fewer (yolo26n's 2 layers: 1 launch with the pe each instead of
//      the attention's 4 launches and the pe convolution's).
//   F. yolo26n_graph_depth: the same before a run (a graph captured for the query) and after (the replayed one);
//      with serial_head 1 every node in series, with the lanes at least 24 fewer (the shorter lanes).
//   G. options.late_head: 0 by default (the head's P3 / P4 lanes start after layers 16 / 19, beside the rest of
//      the neck); 1 (every head lane after the neck) gives the same rows bit for bit, the same graph nodes and
//      at least as many launches in series (the early fork moves a lane's edge from layer 22 to 16 or 19).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "carve_weights.h"
#include "yolo26n.h"

// ---- Allocator counters (--wrap): g_allocs, g_frees ---------------------------

#include "../firmware/wrap_count.h"

// Everything create_with must not do, counted since the last reset().
struct Counts {
  size_t allocs, frees, cuda_malloc, cuda_malloc_host, blas_create;
};

static Counts g_base;

static void reset() {
  g_allocs = g_frees = 0;
  const carve_emu::Allocs& a = carve_emu_allocs();
  g_base = {0, 0, a.cuda_malloc, a.cuda_malloc_host, a.blas_create};
}

static Counts counts() {
  const carve_emu::Allocs& a = carve_emu_allocs();
  return {g_allocs, g_frees, a.cuda_malloc - g_base.cuda_malloc, a.cuda_malloc_host - g_base.cuda_malloc_host,
          a.blas_create - g_base.blas_create};
}

static bool none(const Counts& c) {
  return c.allocs == 0 && c.frees == 0 && c.cuda_malloc == 0 && c.cuda_malloc_host == 0 && c.blas_create == 0;
}

// ---- Checks ------------------------------------------------------------------

static int g_failed;

static void expect(bool ok, const char* what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) g_failed = 1;
}

static void expect_status(carve_status got, carve_status want, const char* what) {
  char line[256];
  std::snprintf(line, sizeof(line), "%s: %s (want %s)", what, carve_status_str(got), carve_status_str(want));
  expect(got == want, line);
}

static std::vector<float> g_input;  // (1, 3, H, W) in [0, 1], fixed seed

// Three runs (eager, graph capture, replay); the rows of the last.
static carve_status run3(yolo26n* m, std::vector<float>* rows) {
  size_t n = 0;
  for (int i = 0; i < 3; i++) {
    const carve_status s = yolo26n_run_tensor(m, g_input.data(), 0.25f, NULL, 0, &n);
    if (s != CARVE_OK) return s;
  }
  size_t count = 0;
  const float* r = yolo26n_rows(m, &count);
  rows->assign(r, r + count * YOLO26N_ROW_LEN);
  return CARVE_OK;
}

static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// create_with `o` in `b` (its status printed as `what`), three runs (the rows of the last into *rows), destroy: the
// graph's nodes (0 when create_with fails).
static size_t created_nodes(const yolo26n_options& o, const yolo26n_buffers& b, const char* what,
                            std::vector<float>* rows) {
  yolo26n* m = NULL;
  expect_status(yolo26n_create_with(&o, &b, &m), CARVE_OK, what);
  if (m == NULL) return 0;
  expect(run3(m, rows) == CARVE_OK, "  three runs");
  const size_t nodes = yolo26n_graph_nodes(m);
  yolo26n_destroy(m);
  return nodes;
}

// The caller's memory of one create_with, allocated outside the counted sections.
struct Caller {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  yolo26n_buffers b;
  Caller() {
    std::memset(&b, 0, sizeof(b));
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess || cublasCreate(&blas) != 0) {
      std::abort();
    }
    b.context_bytes = (YOLO26N_CONTEXT_BYTES + 63) / 64 * 64;
    b.context = std::aligned_alloc(64, b.context_bytes);
    b.arena_bytes = YOLO26N_ARENA_BYTES;
    b.weights_bytes = YOLO26N_WEIGHT_BYTES;
    b.scratch_bytes = YOLO26N_DEVICE_SCRATCH_BYTES;
    b.image_bytes = YOLO26N_DEVICE_IMAGE_BYTES;
    b.blas_workspace_bytes = YOLO26N_BLAS_WORKSPACE_BYTES;
    if (b.context == nullptr || cudaMalloc(&b.arena, b.arena_bytes) != cudaSuccess ||
        cudaMalloc(&b.weights, b.weights_bytes) != cudaSuccess || cudaMalloc(&b.scratch, b.scratch_bytes) != cudaSuccess ||
        cudaMalloc(&b.image, b.image_bytes) != cudaSuccess ||
        cudaMalloc(&b.blas_workspace, b.blas_workspace_bytes) != cudaSuccess) {
      std::abort();
    }
    b.blas = blas;
  }
  ~Caller() {
    cudaFree(b.arena);
    cudaFree(b.weights);
    cudaFree(b.scratch);
    cudaFree(b.image);
    cudaFree(b.blas_workspace);
    std::free(b.context);
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
  }
};

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cuda_options WEIGHTS_FILE\n");
    return 2;
  }
  // Setup (not counted): the input, the weights file's bytes.
  g_input.resize((size_t)3 * YOLO26N_INPUT_H * YOLO26N_INPUT_W);
  uint64_t state = 26;
  for (float& v : g_input) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = (float)(state >> 40) / (float)(1u << 24);
  }
  void* file = NULL;
  size_t file_bytes = 0;
  if (carve_weights_read_file(argv[1], &file, &file_bytes) != CARVE_OK || file_bytes != YOLO26N_WEIGHTS_FILE_BYTES) {
    std::fprintf(stderr, "cuda_options: cannot read %s (or not %u bytes)\n", argv[1], YOLO26N_WEIGHTS_FILE_BYTES);
    return 2;
  }
  const std::vector<uint8_t> good((const uint8_t*)file, (const uint8_t*)file + file_bytes);

  // ---- A. the weights file ----
  std::printf("A. weights file (%zu bytes)\n", file_bytes);
  yolo26n_options opt;
  yolo26n_default_options(&opt);
  opt.weights_path = argv[1];
  yolo26n* m = NULL;
  reset();
  expect_status(yolo26n_create(&opt, &m), CARVE_OK, "create from the path");
  const Counts created = counts();
  expect(created.allocs > 0 && created.cuda_malloc > 0 && created.blas_create == 1,
         "create allocates (positive control: the counters see it)");
  std::vector<float> ref, rows;
  expect_status(run3(m, &ref), CARVE_OK, "create: three runs");
  yolo26n_destroy(m);

  opt.weights_path = NULL;
  opt.weights_data = file;
  opt.weights_size = file_bytes;
  m = NULL;
  expect_status(yolo26n_create(&opt, &m), CARVE_OK, "create from the caller's bytes");
  expect(m != NULL && run3(m, &rows) == CARVE_OK && same_bits(rows, ref), "same rows as from the path");
  yolo26n_destroy(m);

  struct Damage {
    const char* what;
    size_t offset;        // byte to change (SIZE_MAX: none)
    uint8_t xor_with;
    long size_delta;      // bytes removed (< 0) or appended (> 0)
    carve_status want;
  };
  const Damage damages[] = {
      {"magic byte changed", 0, 0x01, 0, CARVE_ERR_WEIGHTS_MAGIC},
      {"format version 1 -> 3", 8, 0x02, 0, CARVE_ERR_WEIGHTS_VERSION},
      {"truncated by one byte", SIZE_MAX, 0, -1, CARVE_ERR_WEIGHTS_SIZE},
      {"64 bytes appended", SIZE_MAX, 0, 64, CARVE_ERR_WEIGHTS_SIZE},
      {"shorter than the header", SIZE_MAX, 0, -(long)(file_bytes - 10), CARVE_ERR_WEIGHTS_SIZE},
      {"payload byte flipped (CRC-32)", CARVE_WEIGHTS_HEADER_BYTES + 1000, 0x10, 0, CARVE_ERR_WEIGHTS_CHECKSUM},
      {"another checkpoint's SHA-256", 32, 0x80, 0, CARVE_ERR_WEIGHTS_MODEL},
  };
  for (const Damage& d : damages) {
    std::vector<uint8_t> bad(good);
    if (d.offset != SIZE_MAX) bad[d.offset] ^= d.xor_with;
    if (d.size_delta < 0) bad.resize(bad.size() - (size_t)(-d.size_delta));
    if (d.size_delta > 0) bad.resize(bad.size() + (size_t)d.size_delta, 0);
    void* aligned = std::aligned_alloc(64, (bad.size() + 63) / 64 * 64);
    std::memcpy(aligned, bad.data(), bad.size());
    opt.weights_data = aligned;
    opt.weights_size = bad.size();
    m = (yolo26n*)&opt;  // must come back NULL
    char what[160];
    std::snprintf(what, sizeof(what), "create, %s", d.what);
    expect_status(yolo26n_create(&opt, &m), d.want, what);
    expect(m == NULL, "  ... and *out is NULL");
    std::free(aligned);
  }
  opt.weights_data = NULL;
  opt.weights_size = 0;
  opt.weights_path = "/nonexistent/yolo26n.weights";
  expect_status(yolo26n_create(&opt, &m), CARVE_ERR_IO, "create, a path that does not exist");
  opt.weights_path = NULL;
  expect_status(yolo26n_create(&opt, &m), CARVE_ERR_INVALID_ARGUMENT, "create, neither bytes nor path");

  // ---- B. create_with ----
  std::printf("B. create_with\n");
  expect(yolo26n_device_scratch_bytes(YOLO26N_MAX_IMAGE_W, YOLO26N_MAX_IMAGE_H) == YOLO26N_DEVICE_SCRATCH_BYTES,
         "device_scratch_bytes(default image) == YOLO26N_DEVICE_SCRATCH_BYTES (the generator's formula)");
  {
    Caller c;
    yolo26n_default_options(&opt);
    opt.stream = c.stream;
    opt.weights_data = file;
    opt.weights_size = file_bytes;
    m = NULL;
    reset();
    const carve_status s = yolo26n_create_with(&opt, &c.b, &m);
    const Counts in_create = counts();
    expect_status(s, CARVE_OK, "create_with (the caller's stream, cuBLAS handle and buffers)");
    expect(none(in_create), "  no malloc/free, cudaMalloc, cudaMallocHost or cublasCreate in create_with");
    expect(m == (yolo26n*)c.b.context, "  the context is the caller's buffer");
    reset();
    const carve_status r = run3(m, &rows);
    const Counts in_runs = counts();
    expect(r == CARVE_OK && same_bits(rows, ref), "  three runs (eager, capture, replay): rows bit-identical to create's");
    // the rows copy above is this file's std::vector (operator new, from libstdc++: not wrapped)
    expect(none(in_runs), "  no allocation in the runs");
    reset();
    yolo26n_destroy(m);
    expect(none(counts()), "  destroy frees nothing");
    cudaStream_t bound = nullptr;
    expect(cublasGetStream(c.blas, &bound) == CUBLAS_STATUS_SUCCESS && bound == c.stream,
           "  the caller's cuBLAS handle is alive after destroy");

    // without a handle: cuBLAS is created (and destroyed) by the context, nothing else allocated
    yolo26n_buffers nb = c.b;
    nb.blas = nullptr;
    reset();
    expect_status(yolo26n_create_with(&opt, &nb, &m), CARVE_OK, "create_with without a cuBLAS handle");
    const Counts no_handle = counts();
    expect(no_handle.allocs == 0 && no_handle.cuda_malloc == 0 && no_handle.blas_create == 1,
           "  exactly one cublasCreate, no malloc, no cudaMalloc");
    expect(run3(m, &rows) == CARVE_OK && same_bits(rows, ref), "  rows bit-identical to create's");
    yolo26n_destroy(m);

    // a smaller largest image needs less scratch and image memory (f16 weights: rebuilt on the host in chunks of
    // 4096 floats on the stack, whatever these buffers)
    const int sizes[2][2] = {{640, 480}, {16, 16}};
    for (const auto& wh : sizes) {
      yolo26n_options small = opt;
      small.max_image_width = wh[0];
      small.max_image_height = wh[1];
      yolo26n_buffers sb = c.b;
      sb.scratch_bytes = yolo26n_device_scratch_bytes(wh[0], wh[1]);
      sb.image_bytes = (size_t)wh[0] * wh[1] * 3;
      const bool f16 = YOLO26N_WEIGHT_STORAGE_BYTES < YOLO26N_WEIGHT_BYTES;
      char chunks[64] = "f32: one upload";
      if (f16) std::snprintf(chunks, sizeof(chunks), "f16: %zu chunks rebuilt", (size_t)((YOLO26N_WEIGHT_BYTES / 4 + 4095) / 4096));
      char what[200];
      std::snprintf(what, sizeof(what), "create_with for images up to %dx%d: scratch %zu, image %zu bytes (%s)", wh[0],
                    wh[1], sb.scratch_bytes, sb.image_bytes, chunks);
      expect_status(yolo26n_create_with(&small, &sb, &m), CARVE_OK, what);
      expect(run3(m, &rows) == CARVE_OK && same_bits(rows, ref), "  rows bit-identical to create's");
      yolo26n_destroy(m);
    }

    // every bad argument: refused before anything is touched or allocated
    struct Bad {
      const char* what;
      void (*edit)(yolo26n_options*, yolo26n_buffers*);
    };
    const Bad bads[] = {
        {"stream NULL", [](yolo26n_options* o, yolo26n_buffers*) { o->stream = nullptr; }},
        {"context NULL", [](yolo26n_options*, yolo26n_buffers* b) { b->context = nullptr; }},
        {"context too small", [](yolo26n_options*, yolo26n_buffers* b) { b->context_bytes = 64; }},
        {"context not 64-byte aligned", [](yolo26n_options*, yolo26n_buffers* b) { b->context = (char*)b->context + 8; }},
        {"arena NULL", [](yolo26n_options*, yolo26n_buffers* b) { b->arena = nullptr; }},
        {"arena too small", [](yolo26n_options*, yolo26n_buffers* b) { b->arena_bytes = YOLO26N_ARENA_BYTES - 1; }},
        {"arena not 256-byte aligned", [](yolo26n_options*, yolo26n_buffers* b) { b->arena = (char*)b->arena + 64; }},
        {"weights too small", [](yolo26n_options*, yolo26n_buffers* b) { b->weights_bytes = YOLO26N_WEIGHT_BYTES - 4; }},
        {"scratch too small", [](yolo26n_options*, yolo26n_buffers* b) { b->scratch_bytes -= 256; }},
        {"image too small", [](yolo26n_options*, yolo26n_buffers* b) { b->image_bytes -= 1; }},
        {"larger max image than the buffers", [](yolo26n_options* o, yolo26n_buffers*) { o->max_image_width += 1; }},
        {"cuBLAS workspace NULL", [](yolo26n_options*, yolo26n_buffers* b) { b->blas_workspace = nullptr; }},
        {"cuBLAS workspace too small", [](yolo26n_options*, yolo26n_buffers* b) { b->blas_workspace_bytes = 1 << 20; }},
        {"a weights path instead of bytes",
         [](yolo26n_options* o, yolo26n_buffers*) { o->weights_data = nullptr; o->weights_path = "yolo26n.weights"; }},
    };
    for (const Bad& bad : bads) {
      yolo26n_options o = opt;
      yolo26n_buffers b = c.b;
      bad.edit(&o, &b);
      m = (yolo26n*)&o;
      reset();
      const carve_status st = yolo26n_create_with(&o, &b, &m);
      char what[160];
      std::snprintf(what, sizeof(what), "create_with, %s", bad.what);
      expect_status(st, CARVE_ERR_INVALID_ARGUMENT, what);
      expect(m == NULL && none(counts()), "  ... *out NULL, nothing allocated");
    }
    expect_status(yolo26n_create_with(&opt, NULL, &m), CARVE_ERR_INVALID_ARGUMENT, "create_with, buffers NULL");

    // a damaged file through create_with: the same statuses, nothing allocated
    std::vector<uint8_t> bad(good);
    bad[CARVE_WEIGHTS_HEADER_BYTES + 7] ^= 0x01;
    void* aligned = std::aligned_alloc(64, (bad.size() + 63) / 64 * 64);
    std::memcpy(aligned, bad.data(), bad.size());
    opt.weights_data = aligned;
    reset();
    expect_status(yolo26n_create_with(&opt, &c.b, &m), CARVE_ERR_WEIGHTS_CHECKSUM, "create_with, payload byte flipped");
    expect(m == NULL && none(counts()), "  ... *out NULL, nothing allocated");
    std::free(aligned);
    opt.weights_data = file;

    // ---- C. tactics ----
    std::printf("C. tactics (options.conv_tune, options.tactics)\n");
    yolo26n_options tuned = opt;
    tuned.conv_tune = 1;
    reset();
    expect_status(yolo26n_create_with(&tuned, &c.b, &m), CARVE_OK, "create_with, conv_tune 1 (timed at create)");
    expect(none(counts()), "  no malloc/free, cudaMalloc, cudaMallocHost or cublasCreate in the timing either");
    std::vector<uint8_t> paths(YOLO26N_TACTIC_SLOTS + 1, 0xff);
    expect_status(yolo26n_tactics(m, paths.data()), CARVE_OK, "yolo26n_tactics");
    size_t timed = 0, set = 0;
    for (size_t s = 0; s < YOLO26N_TACTIC_SLOTS; s++) set += paths[s] != 0 && paths[s] < CARVE_CU_PATHS;
    for (size_t i = 0; i < YOLO26N_NUM_CONVS; i++) timed += yolo26n_conv_path(m, i, nullptr) != 0;
    expect(YOLO26N_TACTIC_SLOTS > 0 && set == YOLO26N_TACTIC_SLOTS && timed >= set && paths[YOLO26N_TACTIC_SLOTS] == 0xff,
           "  every shape timed, each entry a path, nothing written past the slots");
    std::vector<float> tuned_rows;
    expect(run3(m, &tuned_rows) == CARVE_OK && tuned_rows.size() == ref.size(), "  three runs");
    yolo26n_destroy(m);
    yolo26n_options again = opt;
    again.tactics = paths.data();
    expect_status(yolo26n_create_with(&again, &c.b, &m), CARVE_OK, "create_with, options.tactics (conv_tune 0)");
    std::vector<uint8_t> back(YOLO26N_TACTIC_SLOTS);
    bool same = yolo26n_tactics(m, back.data()) == CARVE_OK;
    for (size_t s = 0; s < YOLO26N_TACTIC_SLOTS; s++) same &= back[s] == paths[s];
    expect(same && run3(m, &rows) == CARVE_OK && same_bits(rows, tuned_rows),
           "  the same paths, rows bit-identical to the tuned create's");
    yolo26n_destroy(m);
    std::vector<uint8_t> wrong(paths);
    wrong[YOLO26N_TACTIC_SLOTS - 1] = CARVE_CU_PATHS;
    again.tactics = wrong.data();
    m = (yolo26n*)&again;
    expect_status(yolo26n_create_with(&again, &c.b, &m), CARVE_ERR_INVALID_ARGUMENT, "create_with, an entry CARVE_CU_PATHS (no path)");
    expect(m == NULL, "  ... and *out is NULL");
    expect_status(yolo26n_tactics(NULL, paths.data()), CARVE_ERR_INVALID_ARGUMENT, "yolo26n_tactics(NULL, ...)");

    // ---- D. layer times inside the graph ----
    std::printf("D. options.graph_layer_ms (event-record nodes at the layer ends)\n");
    yolo26n_options marked = opt;
    marked.graph_layer_ms = 1;
    expect_status(yolo26n_create_with(&opt, &c.b, &m), CARVE_OK, "create_with, graph_layer_ms 0");
    std::vector<float> plain_rows;
    expect(run3(m, &plain_rows) == CARVE_OK, "  three runs");
    const size_t plain_nodes = yolo26n_graph_nodes(m);
    yolo26n_destroy(m);
    expect_status(yolo26n_create_with(&marked, &c.b, &m), CARVE_OK, "create_with, graph_layer_ms 1");
    reset();
    expect(run3(m, &rows) == CARVE_OK && same_bits(rows, plain_rows), "  rows bit-identical to the unmarked graph's");
    expect(none(counts()), "  no malloc/free, cudaMalloc, cudaMallocHost or cublasCreate in the runs");
    const double* ms = yolo26n_layer_ms(m);
    bool all = ms != nullptr;
    double sum = 0.0;
    for (int l = 0; all && l < YOLO26N_NUM_LAYERS; l++) {
      all = ms[l] >= 0.0;
      sum += ms[l];
    }
    expect(all && sum > 0.0, "  yolo26n_layer_ms after the graph replay: every layer timed");
    const size_t marked_nodes = yolo26n_graph_nodes(m);
    std::printf("    graph nodes: %zu unmarked, %zu marked (%d layers)\n", plain_nodes, marked_nodes, YOLO26N_NUM_LAYERS);
    expect(plain_nodes > 0 && marked_nodes == plain_nodes + YOLO26N_NUM_LAYERS + 1,
           "  the marked graph: one event-record node per layer end and one at the start");
    yolo26n_destroy(m);

    // ---- E. the attention: the GEMM path by default, the fused launch on request ----
    std::printf("E. options.attention_fused (the attention's fused launch instead of the default's cuBLAS GEMMs)\n");
    expect(opt.attention_fused == 0, "  yolo26n_default_options: attention_fused 0 (the GEMM path)");
    yolo26n_options fused = opt;
    fused.attention_fused = 1;
    std::vector<float> fused_rows;
    const size_t fused_nodes = created_nodes(fused, c.b, "create_with, attention_fused 1", &fused_rows);
    std::printf("    graph nodes: %zu by default (the GEMMs), %zu fused\n", plain_nodes, fused_nodes);
    expect(fused_nodes + 8 == plain_nodes,
           "  8 nodes fewer: yolo26n's 2 attention layers, 1 launch with the pe instead of the GEMM path's 4 and the"
           " pe's (the default takes the GEMM path)");
    double worst = 0.0, spread = 0.0;
    for (size_t i = 0; i < fused_rows.size() && i < plain_rows.size(); i++) {
      worst = std::max(worst, (double)std::fabs(fused_rows[i] - plain_rows[i]));
      spread = std::max(spread, (double)std::fabs(plain_rows[i] - plain_rows[0]));
    }
    // (printed only: another summation order can swap near-tied ranks of the random checkpoint's top-k; the two
    // paths' values are checked against each other in cuda_ops / cuda_f16)
    std::printf("    rows: largest difference from the GEMM path's %.3g (their spread %.3g)\n", worst, spread);
    expect(fused_rows.size() == plain_rows.size() && spread > 1.0, "  rows, which spread");

    // ---- F. launches in series ----
    std::printf("F. yolo26n_graph_depth (the launches in series)\n");
    expect_status(yolo26n_create_with(&opt, &c.b, &m), CARVE_OK, "create_with, the default lanes");
    const size_t query_depth = yolo26n_graph_depth(m);  // before a run: of a graph captured for the query
    expect(run3(m, &rows) == CARVE_OK, "  three runs");
    const size_t lanes_depth = yolo26n_graph_depth(m), lanes_nodes = yolo26n_graph_nodes(m);
    expect(lanes_depth == query_depth, "  the replayed graph's depth is the query's");
    yolo26n_destroy(m);
    yolo26n_options serial = opt;
    serial.serial_head = 1;
    expect_status(yolo26n_create_with(&serial, &c.b, &m), CARVE_OK, "create_with, serial_head 1");
    expect(run3(m, &rows) == CARVE_OK, "  three runs");
    const size_t serial_depth = yolo26n_graph_depth(m), serial_nodes = yolo26n_graph_nodes(m);
    yolo26n_destroy(m);
    std::printf("    nodes / in series: %zu / %zu with the lanes, %zu / %zu serial_head\n", lanes_nodes, lanes_depth,
                serial_nodes, serial_depth);
    expect(serial_nodes == lanes_nodes && serial_depth == serial_nodes,
           "  serial_head 1: the same nodes, all in series");
    // the lanes take every lane but the longest of each region off the chain: the head's five shorter branches
    // (3 + 3 + 3 + 5 + 5 convolutions, a node at least each) and each C3k's cv2 (5 in yolo26n)
    expect(lanes_depth > 0 && lanes_depth + 24 <= lanes_nodes, "  the lanes: at least 24 nodes off the chain");

    // ---- G. the head's early lanes ----
    std::printf("G. options.late_head (every head lane after the neck instead of the P3 / P4 lanes beside it)\n");
    expect(opt.late_head == 0, "  yolo26n_default_options: late_head 0 (the early lanes)");
    yolo26n_options late = opt;
    late.late_head = 1;
    expect_status(yolo26n_create_with(&late, &c.b, &m), CARVE_OK, "create_with, late_head 1");
    std::vector<float> late_rows;
    expect(run3(m, &late_rows) == CARVE_OK, "  three runs");
    const size_t late_depth = yolo26n_graph_depth(m), late_nodes = yolo26n_graph_nodes(m);
    yolo26n_destroy(m);
    std::printf("    nodes / in series: %zu / %zu late_head, %zu / %zu early\n", late_nodes, late_depth, lanes_nodes,
                lanes_depth);
    expect(same_bits(late_rows, plain_rows), "  rows bit-identical to the default's (the early lanes)");
    expect(late_nodes == lanes_nodes && late_depth >= lanes_depth,
           "  the same nodes, at least as many launches in series (the early fork only shortens paths)");
  }
  std::free(file);
  std::printf("cuda_options: %s\n", g_failed ? "FAIL" : "all ok");
  return g_failed;
}
