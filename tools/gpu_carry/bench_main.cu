// Latency and throughput of one carve cuda package (yolo26n, detect, e2e head, any --batch N) on a GPU, for
// tools/gpu_carry/bench.sh: one JSON line on stdout.
//
//   bench_main IMAGE [--runs R] [--strict-fp32] [--fused-conv] [--tune | --no-tune] [--tactics FILE]
//              [--save-tactics FILE] [--serial-head] [--late-head] [--fused-attention] [--label TEXT] [--profile FILE]
//              [--rows FILE]
//
// Every figure is the median wall-clock time of R calls, each call followed by a synchronisation (host clock:
// what a caller waits for, launch overheads included; PyTorch is timed the same way by torch_bench.py):
//   run_image_ms      run_image / run_images from a host image (N copies of IMAGE): upload through the pinned
//                     staging image, letterbox, network, e2e head, copy back, detections on the host
//   device_image_ms   enqueue_images from N device-resident copies of IMAGE (uint8, letterboxed on the device)
//                     on this program's stream, results left on the device, then cudaStreamSynchronize
//   device_tensor_ms  enqueue_tensors from a device-resident (N,3,H,W) float32 tensor: the network and the head
//                     only (what PyTorch + CUDA Graph measures with its input already on the GPU)
//   throughput_ips    N * R / the time of R enqueue_tensors calls back to back and one synchronisation
// plus graph_nodes (launches per forward: the CUDA Graph's nodes), graph_depth (those in series: its longest chain)
// and init_ms (create). --fused-conv sets
// options.fused_conv (the groups-1 convolutions as carve's fused implicit-GEMM kernel, one launch each);
// --tune / --no-tune options.conv_tune 1 / 0 (each convolution shape's path timed at create, or the fixed rule;
// without either the package's default: on with a GPU, off under the emulation), reported as conv_tune with the
// convolutions per path (convs_gemm, convs_fused; a depthwise conv paired with its 1x1, carve_cu_conv2d_dwpw,
// counts its pair's entry: gemm the two launches, fused one); --save-tactics FILE writes the paths create picked
// (yolo26n_tactics: YOLO26N_TACTIC_SLOTS bytes), --tactics FILE creates with them (options.tactics: nothing timed),
// so that rows compared with each other run the same convolution paths;
// --serial-head options.serial_head (the lanes: the head's branches and the C3k forks, one after another instead of
// concurrent); --late-head options.late_head (every head lane after the neck instead of the P3 / P4 lanes
// beside it); --fused-attention options.attention_fused (each attention layer one fused launch where it fits,
// not the default's cuBLAS GEMMs and softmax launch).
// The first two runs of each kind (eager, graph capture) are warm-up and not timed.
//   --profile FILE  after the timings, a second model without the CUDA Graph (use_graph = 0: per-layer events)
//                   runs run_images 5 times; FILE gets one JSON line: the system, batch, launches and each
//                   layer's type, device ms of the last run and GFLOP/s, and each convolution's path and its
//                   two timed paths' microseconds ("convs": [[path, cublas_us, fused_us], ...]; path 0: not timed);
//                   then a third model with the graph and options.graph_layer_ms (an event-record node at every
//                   layer end): "graph_layers", each layer's device ms inside the graph (median of 20 replays),
//                   and their sum "graph_marked_ms" (the marks cut the programmatic launches between layers)
//   --runs 0        one run_images, --rows written, nothing timed (the emulated reference rows)
//   --rows FILE     image 0's raw end-to-end rows of the last run_images (ROWS_PER_IMAGE x ROW_LEN float32,
//                   little-endian): the configurations' outputs compared on the host (tools/gpu_carry/rows.py)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "carve_io.h"
#include "carve_layout.h"
#include "carve_pre.h"
#include "yolo26n.h"

static double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

#define TRY(call)                                                                   \
  do {                                                                              \
    const carve_status s_ = (call);                                                 \
    if (s_ != CARVE_OK) {                                                           \
      std::fprintf(stderr, "bench_main: %s: %s\n", #call, carve_status_str(s_));   \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

#define CUDA(call)                                                                    \
  do {                                                                                \
    if ((call) != cudaSuccess) {                                                      \
      std::fprintf(stderr, "bench_main: %s failed\n", #call);                         \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

static const char kUsage[] =
    "usage: %s IMAGE [--runs R] [--strict-fp32] [--fused-conv] [--tune | --no-tune] [--tactics FILE] "
    "[--save-tactics FILE] [--serial-head] [--late-head] [--fused-attention] [--label TEXT] [--profile FILE] "
    "[--rows FILE]\n";

int main(int argc, char** argv) {
  const char* image = nullptr;
  const char* label = "carve";
  const char* profile = nullptr;
  const char* rows_out = nullptr;
  const char* tactics_in = nullptr;
  const char* tactics_out = nullptr;
  int runs = 100, strict = 0, fused = 0, serial_head = 0, late_head = 0, fused_attention = 0, tune = -1;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--strict-fp32")) {
      strict = 1;
    } else if (!std::strcmp(argv[i], "--serial-head")) {
      serial_head = 1;
    } else if (!std::strcmp(argv[i], "--late-head")) {
      late_head = 1;
    } else if (!std::strcmp(argv[i], "--fused-attention")) {
      fused_attention = 1;
    } else if (!std::strcmp(argv[i], "--fused-conv")) {
      fused = 1;
    } else if (!std::strcmp(argv[i], "--tune") || !std::strcmp(argv[i], "--no-tune")) {
      tune = !std::strcmp(argv[i], "--tune");
    } else if (!std::strcmp(argv[i], "--tactics") && i + 1 < argc) {
      tactics_in = argv[++i];
    } else if (!std::strcmp(argv[i], "--save-tactics") && i + 1 < argc) {
      tactics_out = argv[++i];
    } else if (!std::strcmp(argv[i], "--label") && i + 1 < argc) {
      label = argv[++i];
    } else if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) {
      profile = argv[++i];
    } else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows_out = argv[++i];
    } else if (argv[i][0] != '-' && image == nullptr) {
      image = argv[i];
    } else {
      std::fprintf(stderr, kUsage, argv[0]);
      return 2;
    }
  }
  if (image == nullptr || runs < 0 || (runs == 0 && rows_out == nullptr)) {
    std::fprintf(stderr, kUsage, argv[0]);
    return 2;
  }
  uint8_t* rgb = nullptr;
  int w = 0, h = 0;
  char why[256];
  if (carve_image_load_rgb_msg(image, &rgb, &w, &h, why, sizeof why) != CARVE_OK) {
    std::fprintf(stderr, "bench_main: %s: %s\n", image, why);
    return 1;
  }
  const int n = YOLO26N_BATCH;
  const size_t input = (size_t)3 * YOLO26N_INPUT_H * YOLO26N_INPUT_W;

  yolo26n_options opt;
  yolo26n_default_options(&opt);
  opt.tf32 = !strict;
  opt.serial_head = serial_head;
  opt.late_head = late_head;
  opt.attention_fused = fused_attention;
  opt.fused_conv = fused;
  if (tune >= 0) opt.conv_tune = tune;
  std::vector<uint8_t> tactics(YOLO26N_TACTIC_SLOTS + 1);
  if (tactics_in != nullptr) {
    FILE* f = std::fopen(tactics_in, "rb");
    const size_t got = f != nullptr ? std::fread(tactics.data(), 1, tactics.size(), f) : 0;
    if (f != nullptr) std::fclose(f);
    if (got != YOLO26N_TACTIC_SLOTS) {
      std::fprintf(stderr, "bench_main: --tactics %s: want %d bytes (yolo26n_tactics of this package)\n", tactics_in,
                   (int)YOLO26N_TACTIC_SLOTS);
      return 1;
    }
    opt.tactics = tactics.data();
  }
  opt.max_image_width = w;
  opt.max_image_height = h;
  double t0 = now_ms();
  yolo26n* m = nullptr;
  TRY(yolo26n_create(&opt, &m));
  const double init_ms = now_ms() - t0;
  TRY(yolo26n_tactics(m, tactics.data()));  // the paths create took (or was given), for --profile's second model
  struct ConvPath {
    int path;
    float us[2];
  };
  std::vector<ConvPath> conv_paths(YOLO26N_NUM_CONVS);
  for (size_t c = 0; c < YOLO26N_NUM_CONVS; c++) conv_paths[c].path = yolo26n_conv_path(m, c, conv_paths[c].us);
  if (tactics_out != nullptr) {    FILE* f = std::fopen(tactics_out, "wb");
    if (f == nullptr || std::fwrite(tactics.data(), 1, YOLO26N_TACTIC_SLOTS, f) != YOLO26N_TACTIC_SLOTS ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_main: --save-tactics %s: cannot write it\n", tactics_out);
      return 1;
    }
  }

  std::vector<yolo26n_image> host(n, yolo26n_image{rgb, w, h, (size_t)w * 3});
  std::vector<yolo26n_detection> dets((size_t)n * YOLO26N_MAX_DETECTIONS);
  std::vector<size_t> counts(n);
  std::vector<double> t;

  // run_images from host memory.
  for (int r = 0; r < (runs ? runs + 2 : 1); r++) {
    t0 = now_ms();
    TRY(yolo26n_run_images(m, host.data(), 0.25f, dets.data(), YOLO26N_MAX_DETECTIONS, counts.data()));
    if (r >= 2) t.push_back(now_ms() - t0);
  }
  const double run_image_ms = median(t);
  const size_t detections0 = counts[0];
  if (rows_out != nullptr) {
    size_t rows = 0;
    const float* r0 = yolo26n_batch_rows(m, 0, &rows);
    FILE* f = std::fopen(rows_out, "wb");
    if (r0 == nullptr || f == nullptr ||
        std::fwrite(r0, sizeof(float) * YOLO26N_ROW_LEN, rows, f) != rows || std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_main: --rows %s: cannot write the rows\n", rows_out);
      return 1;
    }
    if (runs == 0) {
      yolo26n_destroy(m);
      carve_image_free(rgb);
      return 0;
    }
  }

  // Device-resident inputs on a stream of ours.
  cudaStream_t stream = nullptr;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint8_t* dimg = nullptr;
  float* dtensor = nullptr;
  CUDA(cudaMalloc((void**)&dimg, (size_t)w * h * 3));
  CUDA(cudaMemcpy(dimg, rgb, (size_t)w * h * 3, cudaMemcpyHostToDevice));
  // the tensor: IMAGE letterboxed on the host (carve_letterbox, the CPU packages' pre-processing) in every slot,
  // so that the head's top-k sees real scores
  std::vector<float> nhwc(input), nchw(input * n);
  std::vector<unsigned char> lb_scratch(carve_letterbox_scratch_bytes(YOLO26N_INPUT_W, YOLO26N_INPUT_H) + 64);
  carve_letterbox_info info;
  TRY(carve_letterbox(rgb, w, h, (size_t)w * 3, YOLO26N_INPUT_W, YOLO26N_INPUT_H, nhwc.data(), lb_scratch.data(),
                      &info, NULL));
  TRY(carve_nhwc_to_nchw(nhwc.data(), 3, YOLO26N_INPUT_H, YOLO26N_INPUT_W, 3, nchw.data()));
  for (int b = 1; b < n; b++) std::copy(nchw.begin(), nchw.begin() + input, nchw.begin() + b * input);
  CUDA(cudaMalloc((void**)&dtensor, input * n * sizeof(float)));
  CUDA(cudaMemcpy(dtensor, nchw.data(), input * n * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<yolo26n_image> device(n, yolo26n_image{dimg, w, h, (size_t)w * 3});

  t.clear();
  for (int r = 0; r < runs + 2; r++) {
    t0 = now_ms();
    TRY(yolo26n_enqueue_images(m, stream, device.data(), 0));
    CUDA(cudaStreamSynchronize(stream));
    if (r >= 2) t.push_back(now_ms() - t0);
  }
  const double device_image_ms = median(t);

  t.clear();
  for (int r = 0; r < runs; r++) {
    t0 = now_ms();
    TRY(yolo26n_enqueue_tensors(m, stream, dtensor, 0));
    CUDA(cudaStreamSynchronize(stream));
    t.push_back(now_ms() - t0);
  }
  const double device_tensor_ms = median(t);

  t0 = now_ms();
  for (int r = 0; r < runs; r++) {
    TRY(yolo26n_enqueue_tensors(m, stream, dtensor, 0));
  }
  CUDA(cudaStreamSynchronize(stream));
  const double throughput = n * runs / ((now_ms() - t0) / 1000.0);

  int paths[2] = {0, 0};  // timed: the cuBLAS path, the fused kernel (any tile)
  for (const ConvPath& c : conv_paths) {
    if (c.path != 0) paths[c.path == 1 ? 0 : 1]++;
  }
  std::printf("{\"system\": \"%s\", \"batch\": %d, \"tf32\": %s, \"fused_conv\": %s, \"conv_tune\": %s, "
              "\"convs_gemm\": %d, \"convs_fused\": %d, \"runs\": %d, "
              "\"init_ms\": %.1f, \"run_image_ms\": %.4f, \"device_image_ms\": %.4f, \"device_tensor_ms\": %.4f, "
              "\"throughput_ips\": %.1f, \"graph_nodes\": %zu, \"graph_depth\": %zu, \"detections_image0\": %zu}\n",
              label, n, strict ? "false" : "true", fused ? "true" : "false", opt.conv_tune ? "true" : "false",
              paths[0], paths[1], runs, init_ms, run_image_ms, device_image_ms, device_tensor_ms,
              throughput, yolo26n_graph_nodes(m), yolo26n_graph_depth(m), detections0);
  yolo26n_destroy(m);
  if (profile != nullptr) {
    opt.use_graph = 0;
    opt.tactics = tactics.data();  // the same paths (nothing timed again)
    TRY(yolo26n_create(&opt, &m));
    for (int r = 0; r < 5; r++)
      TRY(yolo26n_run_images(m, host.data(), 0.25f, dets.data(), YOLO26N_MAX_DETECTIONS, counts.data()));
    const double* ms = yolo26n_layer_ms(m);
    // A third model: the CUDA Graph with an event-record node at every layer end (options.graph_layer_ms): each
    // layer's device time inside the graph, the median of 20 replays ("graph_layers"; the marks cut the
    // programmatic launches at the layer boundaries, so their sum, "graph_marked_ms", exceeds the plain graph's).
    // A failure here (reported) leaves "graph_layers": null and the rest of the line as it is.
    std::vector<double> marked_layers;
    {
      yolo26n_options marked = opt;
      marked.use_graph = 1;
      marked.graph_layer_ms = 1;
      yolo26n* g = nullptr;
      std::vector<std::vector<double>> per(YOLO26N_NUM_LAYERS);
      carve_status st = yolo26n_create(&marked, &g);
      for (int r = 0; r < 22 && st == CARVE_OK; r++) {
        st = yolo26n_run_images(g, host.data(), 0.25f, dets.data(), YOLO26N_MAX_DETECTIONS, counts.data());
        const double* gm = yolo26n_layer_ms(g);
        for (int l = 0; r >= 2 && gm != nullptr && l < YOLO26N_NUM_LAYERS; l++) per[l].push_back(gm[l]);  // 2 warm-up
      }
      if (st != CARVE_OK || per[0].empty()) {
        std::fprintf(stderr, "bench_main: the graph with layer marks: %s\n",
                     st != CARVE_OK ? carve_status_str(st) : "no layer times");
      } else {
        for (int l = 0; l < YOLO26N_NUM_LAYERS; l++) marked_layers.push_back(median(per[l]));
      }
      if (g != nullptr) yolo26n_destroy(g);
    }
    FILE* f = std::fopen(profile, "a");
    if (ms == nullptr || f == nullptr) {
      std::fprintf(stderr, "bench_main: --profile %s: no per-layer times\n", profile);
      return 1;
    }
    std::fprintf(f, "{\"system\": \"%s\", \"batch\": %d, \"graph_nodes\": %zu, \"layers\": [", label, n,
                 yolo26n_graph_nodes(m));
    for (int l = 0; l < YOLO26N_NUM_LAYERS; l++)
      std::fprintf(f, "%s[\"%s\", %.5f, %.1f]", l ? ", " : "", yolo26n_layer_type(l), ms[l],
                   ms[l] > 0 ? yolo26n_layer_flops(l) / (ms[l] * 1e6) : 0.0);
    if (!marked_layers.empty()) {
      std::fprintf(f, "], \"graph_layers\": [");
      double marked_ms = 0.0;
      for (int l = 0; l < YOLO26N_NUM_LAYERS; l++) {
        marked_ms += marked_layers[l];
        std::fprintf(f, "%s%.5f", l ? ", " : "", marked_layers[l]);
      }
      std::fprintf(f, "], \"graph_marked_ms\": %.4f", marked_ms);
    } else {
      std::fprintf(f, "], \"graph_layers\": null");
    }
    std::fprintf(f, ", \"convs\": [");
    for (size_t c = 0; c < YOLO26N_NUM_CONVS; c++) {
      const ConvPath& p = conv_paths[c];  // as the first model's create timed them
      std::fprintf(f, "%s[%d, %.2f, %.2f]", c ? ", " : "", p.path, p.us[0], p.us[1]);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
    yolo26n_destroy(m);
  }
  cudaFree(dimg);
  cudaFree(dtensor);
  cudaStreamDestroy(stream);
  carve_image_free(rgb);
  return 0;
}
