#include "sim/compute/gpu_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "sim/calib/calibration.hpp"
#include "sim/compute/gemm_model.hpp"
#include "sim/core/error.hpp"

namespace parmsim {

namespace {
// Sources, cited once here and by key in the profiles below.
// [MLE]  stas00/ml-engineering@744d01e1 compute/accelerator/README.md: dense peak TFLOP/s table
//        (L260 B200, L264 H200, L265 H100, L275 A100 SXM), HBM bandwidth table (L474 B200 8.00,
//        L476 H200 4.80, L484 H100 3.35 TB/s).
// [GPUBG] NVIDIA "GPU Performance Background User's Guide",
//        https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html:
//        A100 108 SMs, up to 2039 GB/s HBM2e; H100/H200 132 SMs (also ml-engineering
//        training/performance/README.md L604).
// [ZZC]  zzc0721/torch-performance-test-data@9d828276 database.md: best TFLOP/s of torch.mm over
//        square N in {1024, 2048, 4096, 8192, 10240}, CUDA events over 30 back-to-back calls, FP32
//        with TF32 disabled (test.py L131-191, L223-275). These are the "sustained" figures: the
//        most cuBLAS reached on that GPU, the same measurement for every profile.
// Fixed floor, every GPU: 3 us, "about 3 microseconds with recent hardware and software" for a
//        null kernel, https://forums.developer.nvidia.com/t/too-much-time-for-kernel-launch-latency/233645/3
// HBM sustained fraction, every GPU: 1355 / 1555 = 0.871, a measured memory copy on an A100 40GB
//        against its 1555 GB/s datasheet figure, https://github.com/PTsolvers/gpu-workshop-JuliaCon23/issues/7;
//        BabelStream on an RTX 2060 (GDDR6) reaches 304 of 336 GB/s = 0.905,
//        https://github.com/alpaka-group/alpaka/issues/1874.
constexpr double kMemEfficiency = 1355.0 / 1555.0;
constexpr Time kGpuFloor = Time::ns(3000);

GpuProfile make(std::string name, std::string source, int sms, double fp32, double tf32, double fp16, double bf16,
                double s32, double s16, double sb16, double hbm, double mem_eff = kMemEfficiency,
                Time launch = kGpuFloor) {
  GpuProfile g;
  g.name = std::move(name);
  g.source = std::move(source);
  g.sm_count = sms;
  g.peak_fp32 = fp32;
  g.peak_tf32 = tf32;
  g.peak_fp16 = fp16;
  g.peak_bf16 = bf16;
  g.sustained_fp32 = s32;
  g.sustained_fp16 = s16;
  g.sustained_bf16 = sb16;
  g.hbm_bandwidth = hbm;
  g.mem_efficiency = mem_eff;
  g.launch = launch;
  return g;
}
// NCCL's per-GPU facts: the compute capability (CUDA C Programming Guide, "Compute
// Capabilities": Volta 7.0, Turing 7.5, A100 8.0, GA102 8.6, AD102 8.9, H100/H200/H800 9.0,
// B200 10.0) and
// the NVLink efficiency, NCCL's per-link NVLink bandwidth over the line rate
// (NVIDIA/nccl src/graph/topo.h: SM80_NVLINK_BW 20.0, SM90 20.6, SM100 40.1 GB/s
// against 25, 25 and 50 GB/s per link). The GeForce and RTX cards keep 1.0:
// the shipped topologies give them no NVLink.
GpuProfile with_nccl(GpuProfile g, int compute_capability, double nvlink_efficiency) {
  g.compute_capability = compute_capability;
  g.nvlink_efficiency = nvlink_efficiency;
  return g;
}
// Device memory capacity. Datasheets print "GB"; DRAM dies are binary (a 352-bit RTX 2080 Ti
// carries eleven 8 Gbit GDDR6 chips = 11 GiB), and "most often, memory size will be in GiB (with
// the i omitted)" [stas00/ml-engineering@744d01e1 compute/accelerator/README.md L456], so the
// figure is read as GiB. It is the whole card: the CUDA context, NCCL's buffers outside the model
// and ECC reservations are not taken off (e.g. B200: 192 physical, 180 usable, ibid. L458).
GpuProfile with_memory(GpuProfile g, std::uint64_t gib) {
  g.memory_bytes = gib << 30;
  return g;
}
// Dense FP8 tensor-core peak: [MLE] compute/accelerator/README.md's fp8 column, H100 SXM 1979
// (L265), H200 SXM 1979 (L264), B200 SXM 4500 TFLOP/s (L260); A100 and older have none ("X", L275).
// H800 SXM5 is the H100 SXM5's GH100 silicon with NVLink and FP64 cut, so H100's figure.
// Sustained FP8 GEMM throughput: the best dense GEMM DeepGEMM published on an H800 SXM5 (NVCC
// 12.8; e4m3 inputs with DeepSeek-V3's 1x128 / 128x128 scales, bf16 output), 1426 TFLOP/s at
// m=4096, n=7168, k=16384 [deepseek-ai/DeepGEMM@55ab91f7 README.md, "Normal GEMMs for dense
// models"]; the most of that table and of its grouped GEMMs (1346), so the "sustained" figure
// as the other dtypes' (a published maximum). H100 and H200 SXM are the same GH100 silicon at
// the same clocks (H200's sustained BF16 is within 1% of H100's), so the same figure. B200: no
// published FP8 GEMM measurement found, 0 (the peak).
constexpr double kHopperSustainedFp8 = 1426e12;
GpuProfile with_fp8(GpuProfile g, double peak, double sustained = 0) {
  g.peak_fp8 = peak;
  g.sustained_fp8 = sustained;
  return g;
}
}  // namespace

const std::vector<GpuProfile>& gpu_profiles() {
  // Peaks are dense (no sparsity). Arguments: SMs; peak FP32 SIMT, TF32, FP16, BF16; sustained
  // FP32, FP16, BF16 (FLOP/s); HBM bytes/s.
  static const std::vector<GpuProfile> p = {
      // Memory: 80 GB HBM3 [ml-engineering@744d01e1 compute/accelerator/README.md L484].
      with_fp8(with_memory(with_nccl(make("h100",
           "H100 SXM5: 132 SMs [NVIDIA GPU background guide]; peaks 67 FP32 / 494.5 TF32 / 989 FP16 / 989 BF16 "
           "TFLOP/s and 3.35 TB/s HBM3 [stas00/ml-engineering@744d01e1 compute/accelerator/README.md L265, L484]; "
           "cuBLAS sustains 51.88 FP32 / 760.04 FP16 / 797.51 BF16 TFLOP/s "
           "[zzc0721/torch-performance-test-data@9d828276 database.md L34, issue #79]",
           132, 67e12, 494.5e12, 989e12, 989e12, 51.88e12, 760.04e12, 797.51e12, 3.35e12), 90, 20.6 / 25.0), 80), 1979e12,
           kHopperSustainedFp8),
      // Memory: 141 GB HBM3e [ml-engineering@744d01e1 compute/accelerator/README.md L476].
      with_fp8(with_memory(with_nccl(make("h200",
           "H200 SXM: H100 compute, 132 SMs; peaks 67 / 494.5 / 989 / 989 TFLOP/s, 4.8 TB/s HBM3e "
           "[ml-engineering@744d01e1 compute/accelerator/README.md L264, L476]; sustained 51.34 FP32 / 759.40 FP16 "
           "/ 790.29 BF16 TFLOP/s [zzc0721/torch-performance-test-data@9d828276 database.md L57]",
           132, 67e12, 494.5e12, 989e12, 989e12, 51.34e12, 759.40e12, 790.29e12, 4.8e12), 90, 20.6 / 25.0), 141), 1979e12,
           kHopperSustainedFp8),
      // Memory: 80 GB HBM2e [ml-engineering@744d01e1 compute/accelerator/README.md L485].
      with_memory(with_nccl(make("a100",
           "A100 SXM4 80GB: 108 SMs, 2039 GB/s HBM2e [NVIDIA GPU Performance Background guide]; peaks 19.5 FP32 / "
           "156 TF32 / 312 FP16 / 312 BF16 TFLOP/s [ml-engineering@744d01e1 compute/accelerator/README.md L275]; "
           "sustained 19.18 FP32 / 258.74 FP16 / 264.53 BF16 TFLOP/s "
           "[zzc0721/torch-performance-test-data@9d828276 database.md L13]",
           108, 19.5e12, 156e12, 312e12, 312e12, 19.18e12, 258.74e12, 264.53e12, 2.039e12), 80, 20.0 / 25.0), 80),
      // Memory: 11 GB GDDR6, eleven 32-bit 8 Gbit chips on the 352-bit bus (NVIDIA product specification).
      with_memory(with_nccl(make("rtx2080ti",
           "GeForce RTX 2080 Ti (Turing TU102): 68 SMs at 1.545 GHz (https://github.com/tensorflow/tensorflow/issues/"
           "42572); 13.45 TFLOP/s FP32 (https://gpu.spicedreamphone.com/ru/gpu/nvidia/geforce-rtx-2080-ti); FP16 "
           "tensor with FP32 accumulate 53.8 TFLOP/s, derived: 544 tensor cores x 64 FMA/clk x 2 x 1.545 GHz, halved "
           "for FP32 accumulate on GeForce (https://github.com/tensorflow/tensorflow/issues/24531); no TF32, no BF16 "
           "tensor cores; 616 GB/s GDDR6 (352-bit x 14 Gbit/s, NVIDIA product specification); sustained 13.04 FP32 / "
           "58.58 FP16 TFLOP/s [zzc0721/torch-performance-test-data@9d828276 database.md L119, issue #115], above "
           "the reference-clock peak because cards boost past 1.545 GHz",
           68, 13.45e12, 0, 53.8e12, 0, 13.04e12, 58.58e12, 0, 616e9), 75, 1.0), 11),
      // Memory: 48 GB GDDR6 (NVIDIA RTX A6000 datasheet).
      with_memory(with_nccl(make("rtx_a6000",
           "RTX A6000 (GA102): 84 SMs, 38.7 TFLOP/s FP32 at 1.8 GHz "
           "(https://sysrqmts.com/es/gpus/compare/nvidia-rtx-a6000-vs-nvidia-tesla-p40); 154.8 FP16/BF16 tensor dense "
           "(https://llmperf.net/categories/gpu/Nvidia-A6000-GPUs); TF32 77.4, derived with the A40 datasheet ratio "
           "74.8/149.7; 768 GB/s GDDR6 (NVIDIA RTX A6000 datasheet); sustained 23.92 FP32 / 120.49 FP16 / 123.34 "
           "BF16 TFLOP/s [zzc0721/torch-performance-test-data@9d828276 database.md L58]",
           84, 38.7e12, 77.4e12, 154.8e12, 154.8e12, 23.92e12, 120.49e12, 123.34e12, 768e9), 86, 1.0), 48),
      // Memory: 180 GB HBM3e usable of 192 physical [ml-engineering@744d01e1 compute/accelerator/README.md L474, L458].
      with_fp8(with_memory(with_nccl(make("b200",
           "B200 SXM: 148 SMs (one SKU); peaks 80 FP32 / 1125 TF32 / 2250 FP16 / 2250 BF16 TFLOP/s, 8 TB/s HBM3e "
           "[ml-engineering@744d01e1 compute/accelerator/README.md L260, L474]; sustained 66.24 FP32 / 1627.64 FP16 "
           "/ 1696.03 BF16 TFLOP/s [zzc0721/torch-performance-test-data@9d828276 database.md L3]",
           148, 80e12, 1125e12, 2250e12, 2250e12, 66.24e12, 1627.64e12, 1696.03e12, 8e12), 100, 40.1 / 50.0), 180), 4500e12),
      // Memory: 32 GB HBM2 (NVIDIA V100 datasheet, V100 SXM2 32GB). NCCL: sm_70 is NCCL's Volta tuner class
      // (NCCL_VOLTA_COMPCAP_IDX 0, NVIDIA/nccl@5067397c src/graph/tuning.cc L263-266) and its NVLink counts
      // SM70_NVLINK_BW 20.0 of NVLink2's 25 GB/s per link (src/graph/topo.h L20, L279).
      with_memory(with_nccl(make("v100",
           "Tesla V100 SXM2 32GB (Volta GV100): 80 SMs, 1530 MHz boost; 15.7 FP32 / 125 FP16 tensor TFLOP/s "
           "(FP32 accumulate at full rate on Volta), 900 GB/s HBM2 (NVIDIA V100 datasheet, "
           "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf; "
           "derived: 80 SMs x 64 FP32 lanes x 2 x 1.53 GHz = 15.67, 640 tensor cores x 64 FMA x 2 x 1.53 GHz = "
           "125.3); no TF32, no BF16 tensor cores; sustained 14.06 FP32 / 94.84 FP16 TFLOP/s measured on a V100-SXM2-"
           "16GB, the same GV100 at the same clocks [zzc0721/torch-performance-test-data@9d828276 database.md L65] "
           "(its 10.34 BF16 is emulation, not a tensor-core path)",
           80, 15.7e12, 0, 125e12, 0, 14.06e12, 94.84e12, 0, 900e9), 70, 20.0 / 25.0), 32),
      // Memory: 48 GB GDDR6 (https://www.topcpu.net/en/gpu-c/a40-pcie-vs-l20). NCCL: sm_89 is NCCL's
      // Ampere tuner class (>= 80, tuning.cc L265) and topo.h L278 gives it SM80_NVLINK_BW 20.0 of 25; the L20
      // has no NVLink (PCIe 4.0 x16 only), so the efficiency matters only to a what-if topology that gives it one.
      with_memory(with_nccl(make("l20",
           "NVIDIA L20 (Ada AD102, PCIe 4.0 x16): 92 SMs (368 tensor cores), 2520 MHz boost, 48 GB GDDR6 at 864 GB/s "
           "(https://www.topcpu.net/en/gpu-c/a40-pcie-vs-l20); FP32 59.35 TFLOP/s = 92 x 128 lanes x 2 x 2.52 GHz "
           "(ibid.); FP16/BF16 tensor with FP32 accumulate 118.7 dense, derived: 92 SMs x 256 FMA/clk x 2 x 2.52 GHz "
           "(AD102's half-rate FP32 accumulate; the measured 113.26 FP16 below is 95% of it), TF32 half that, 59.35; "
           "sustained 37.27 FP32 / 113.26 FP16 / 114.14 BF16 TFLOP/s "
           "[zzc0721/torch-performance-test-data@9d828276 database.md L111]",
           92, 59.35e12, 59.35e12, 118.7e12, 118.7e12, 37.27e12, 113.26e12, 114.14e12, 864e9), 89, 20.0 / 25.0), 48),
      // Memory: 80 GB HBM3, as H100 SXM5 [ml-engineering@744d01e1 compute/accelerator/README.md L484].
      // NCCL: sm_90, as H100 (SM90_NVLINK_BW 20.6 of 25 per link, topo.h L22, L276).
      with_fp8(with_memory(with_nccl(make("h800",
           "H800 SXM5: the H100 SXM5 (GH100, 132 SMs, HBM3 80 GB at 3.35 TB/s) with FP64 and NVLink cut "
           "(https://www.philisun.com/technical-analysis/nvidia-h800-vs-h100-a-technical-deep-dive-into-politically-"
           "defined-ai-chips/); peaks 67 / 494.5 / 989 / 989 TFLOP/s as H100 SXM [ml-engineering@744d01e1 "
           "compute/accelerator/README.md L265, L484]; sustained: no SXM5 measurement published (database.md L116 is "
           "the H800 PCIe, 114 SMs), so H100 SXM's 51.88 / 760.04 / 797.51 TFLOP/s [zzc0721/torch-performance-test-"
           "data@9d828276 database.md L34], the same silicon at the same clocks. NVLink is 400 GB/s per GPU, not "
           "H100's 900: that lives in the topology (its links), not in this profile",
           132, 67e12, 494.5e12, 989e12, 989e12, 51.88e12, 760.04e12, 797.51e12, 3.35e12), 90, 20.6 / 25.0), 80), 1979e12,
           kHopperSustainedFp8),
      // No tile model (sm_count 0): launch + max(flops / peak, bytes / bandwidth).
      // Memory: not a card; an explicit round 16 GiB of host memory for the CPU executor, chosen, not measured.
      with_memory(with_nccl(make("cpu",
           "A CPU core running parmsim's reference kernels (rough: 2 GFLOP/s, 5 GB/s, 1 us per kernel); calibrate it "
           "(parmsim calibrate --backend cpu) before trusting it",
           0, 2e9, 0, 2e9, 2e9, 0, 0, 0, 5e9, 1.0, Time::ns(1000)), 0, 1.0), 16),
  };
  return p;
}

void GpuProfile::unsupported(DType d) const {
  if (d == DType::fp8) {
    std::string with;
    for (const GpuProfile& g : gpu_profiles())
      if (g.peak_fp8 > 0) with += (with.empty() ? "" : ", ") + g.name;
    throw UserError(fmt::format("key 'dtype': fp8 needs FP8 tensor cores; GPU '{}' has none (GPUs with fp8: {})", name,
                                with));
  }
  throw UserError(fmt::format("GPU profile '{}' does not support {}", name, to_string(d)));
}

std::string gpu_profile_names() {
  std::string known;
  for (const GpuProfile& g : gpu_profiles()) known += (known.empty() ? "" : ", ") + g.name;
  return known;
}

const GpuProfile& gpu_profile(const std::string& name) {
  for (const GpuProfile& g : gpu_profiles())
    if (g.name == name) return g;
  throw UserError(fmt::format("unknown GPU profile '{}'; known profiles: {}", name, gpu_profile_names()));
}

Time compute_time(const ComputeRates& r, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                  const Calibration* cal, std::string_view kind, std::span<const std::int64_t> shape) {
  if (op == OpKind::host) return Time::zero();  // the host's time is the task's host_wait
  if (cal && !kind.empty())
    if (const KernelTable* k = cal->kernel(kind, dtype))
      return k->time(static_cast<double>(k->op == OpKind::gemm ? flops : bytes));
  return model_compute_time(r, op, flops, bytes, dtype, shape);
}

Time compute_time(const GpuProfile& gpu, OpKind op, std::uint64_t flops, std::uint64_t bytes, DType dtype,
                  const Calibration* cal, std::string_view kind, std::span<const std::int64_t> shape) {
  return compute_time(ComputeRates(gpu), op, flops, bytes, dtype, cal, kind, shape);
}

double max_gemm_efficiency(const GpuProfile& g) {
  double most = INFINITY;
  for (auto [peak, sustained] : {std::pair{g.peak_fp32, g.sustained_fp32}, std::pair{g.peak_fp16, g.sustained_fp16},
                                 std::pair{g.peak_bf16, g.sustained_bf16}})
    // A profile whose measured maximum is above its derived peak (the RTX 2080 Ti's fp16)
    // keeps its own figure as the bound: 1 is always allowed.
    if (peak > 0) most = std::min(most, std::max(peak, sustained) / (sustained > 0 ? sustained : peak));
  // fp8 bounds it only where a measured figure exists (H100, H200, H800): B200's fp8 runs at its
  // datasheet peak (no published fp8 GEMM measurement found), which the factor then scales like
  // the rest, so that adding fp8 left every other dtype's bound as it was.
  if (g.peak_fp8 > 0 && g.sustained_fp8 > 0) most = std::min(most, std::max(g.peak_fp8, g.sustained_fp8) / g.sustained_fp8);
  return most;
}

}  // namespace parmsim
