#include "backend/cpu/communicator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sim/core/error.hpp"

namespace parmsim::exec {
namespace {

// A view of one member's buffer as rows with a column window.
struct View {
  float* base;
  std::size_t elems;  // usable elements from base
  std::size_t row, c0, cw;
  // Element i of the windowed sequence (row-major over the window).
  float& at(std::size_t i) const { return base[(i / cw) * row + c0 + i % cw]; }
  std::size_t size() const { return elems / row * cw; }
};

struct Bufs {
  std::vector<View> send, recv;
};

Bufs views(const Collective& c, Memory& mem) {
  if (c.send_buf.empty() || c.recv_buf.empty())
    throw UserError(fmt::format("collective '{}': no send_buf/recv_buf: it cannot be executed", c.name));
  Bufs b;
  for (std::size_t mi = 0; mi < c.group.size(); ++mi) {
    const int r = c.group[mi];
    auto& s = mem.at(r, c.send_buf);
    auto& d = mem.at(r, c.recv_buf);
    const std::uint64_t offset = c.member_send_offset.empty() ? c.send_offset : c.member_send_offset.at(mi);
    if (offset > s.size())
      throw UserError(fmt::format("collective '{}': send_offset {} beyond buffer '{}' ({} elements) on rank {}", c.name,
                                  offset, c.send_buf, s.size(), r));
    const std::size_t row = c.row ? c.row : 1;
    const std::size_t c0 = c.col_count ? c.col_begin : 0, cw = c.col_count ? c.col_count : row;
    if (c0 + cw > row)
      throw UserError(fmt::format("collective '{}': columns [{}, {}) outside rows of {}", c.name, c0, c0 + cw, row));
    const std::size_t avail = s.size() - offset;
    if (c.send_count > avail)
      throw UserError(fmt::format("collective '{}': send_count {} beyond buffer '{}' on rank {}", c.name, c.send_count,
                                  c.send_buf, r));
    const std::size_t sn = c.send_count ? c.send_count : avail;
    if (sn % row || d.size() % row)
      throw UserError(
          fmt::format("collective '{}': buffers '{}' ({}) and '{}' ({}) on rank {} are not whole rows "
                      "of {} elements",
                      c.name, c.send_buf, sn, c.recv_buf, d.size(), r, row));
    b.send.push_back({s.data() + offset, sn, row, c0, cw});
    b.recv.push_back({d.data(), d.size(), row, c0, cw});
  }
  return b;
}

[[noreturn]] void bad_size(const Collective& c, std::size_t send, std::size_t recv, const std::string& want) {
  throw UserError(
      fmt::format("collective '{}' ({} over {} ranks): buffers '{}' ({} elements in use) and '{}' ({}) "
                  "do not fit: {}",
                  c.name, to_string(c.op), c.group.size(), c.send_buf, send, c.recv_buf, recv, want));
}

}  // namespace

void run_collective(const Collective& c, Memory& mem) {
  const std::size_t p = c.group.size();
  Bufs b = views(c, mem);
  const std::size_t sn = b.send[0].size(), rn = b.recv[0].size();
  for (std::size_t m = 1; m < p; ++m)
    if (b.send[m].size() != sn || b.recv[m].size() != rn)
      throw UserError(
          fmt::format("collective '{}': buffer sizes differ between ranks {} and {}", c.name, c.group[0], c.group[m]));
  std::vector<float> tmp;
  switch (c.op) {
    case CollOp::allreduce: {
      if (sn != rn) bad_size(c, sn, rn, "send and receive the same size");
      tmp.assign(sn, 0.0f);
      for (std::size_t m = 0; m < p; ++m)
        for (std::size_t i = 0; i < sn; ++i) tmp[i] += b.send[m].at(i);
      for (std::size_t m = 0; m < p; ++m)
        for (std::size_t i = 0; i < sn; ++i) b.recv[m].at(i) = tmp[i];
      return;
    }
    case CollOp::allgather: {
      if (rn != sn * p) bad_size(c, sn, rn, fmt::format("receive = {} x send", p));
      std::vector<std::vector<float>> in(p);
      for (std::size_t m = 0; m < p; ++m)
        for (std::size_t i = 0; i < sn; ++i) in[m].push_back(b.send[m].at(i));
      for (std::size_t d = 0; d < p; ++d)
        for (std::size_t m = 0; m < p; ++m)
          for (std::size_t i = 0; i < sn; ++i) b.recv[d].at(m * sn + i) = in[m][i];
      return;
    }
    case CollOp::reducescatter: {
      if (sn != rn * p) bad_size(c, sn, rn, fmt::format("send = {} x receive", p));
      std::vector<std::vector<float>> out(p, std::vector<float>(rn, 0.0f));
      for (std::size_t m = 0; m < p; ++m)
        for (std::size_t d = 0; d < p; ++d)
          for (std::size_t i = 0; i < rn; ++i) out[d][i] += b.send[m].at(d * rn + i);
      for (std::size_t d = 0; d < p; ++d)
        for (std::size_t i = 0; i < rn; ++i) b.recv[d].at(i) = out[d][i];
      return;
    }
    case CollOp::alltoall: {
      if (sn != rn || sn % p) bad_size(c, sn, rn, fmt::format("send = receive, divisible by {}", p));
      const std::size_t blk = sn / p;
      std::vector<std::vector<float>> in(p);
      for (std::size_t m = 0; m < p; ++m)
        for (std::size_t i = 0; i < sn; ++i) in[m].push_back(b.send[m].at(i));
      for (std::size_t d = 0; d < p; ++d)
        for (std::size_t s = 0; s < p; ++s)
          for (std::size_t i = 0; i < blk; ++i) b.recv[d].at(s * blk + i) = in[s][d * blk + i];
      return;
    }
    case CollOp::sendrecv: {
      if (sn > rn) bad_size(c, sn, rn, "receive at least as large as send");
      for (std::size_t i = 0; i < sn; ++i) b.recv[1].at(i) = b.send[0].at(i);
      return;
    }
    case CollOp::saa: {
      // W rounds as the simulator's algorithm: in round i member m sends its
      // chunk for outer peer (block + i) and, once a chunk has arrived, passes
      // it to its inner peers. Result: AllGather_inner(AlltoAll_outer(send)).
      const std::size_t G = static_cast<std::size_t>(c.inner), W = p / G;
      if (sn % W || rn != sn * G) bad_size(c, sn, rn, fmt::format("send divisible by {}, receive = {} x send", W, G));
      const std::size_t chunk = sn / W;
      std::vector<std::vector<float>> in(p);
      for (std::size_t m = 0; m < p; ++m)
        for (std::size_t i = 0; i < sn; ++i) in[m].push_back(b.send[m].at(i));
      for (std::size_t round = 0; round < W; ++round)
        for (std::size_t m = 0; m < p; ++m) {
          const std::size_t blk = m / G, l = m % G;
          const std::size_t src_blk = (blk + W - round) % W;  // outer peer whose chunk arrives this round
          const std::size_t src = src_blk * G + l;
          // The chunk `src` holds for outer block `blk`, placed at [source block] in the
          // AlltoAll result of m, which lands in slot l of every inner peer's receive buffer.
          for (std::size_t l2 = 0; l2 < G; ++l2) {
            const std::size_t dst = blk * G + l2;
            for (std::size_t i = 0; i < chunk; ++i)
              b.recv[dst].at(l * sn + src_blk * chunk + i) = in[src][blk * chunk + i];
          }
        }
      return;
    }
    case CollOp::alltoallv:
      throw UserError(fmt::format("collective '{}': alltoallv is not executable on the CPU backend yet", c.name));
  }
}

}  // namespace parmsim::exec
