#include "backend/device/coll_plan.hpp"

#include <fmt/format.h>

#include <map>

#include "sim/core/error.hpp"

namespace parmsim::exec::dev {

namespace {

std::uint64_t size_of(const TaskGraph& g, int rank, const std::string& name, const Collective& c) {
  for (const Buffer& b : g.buffers())
    if (b.rank == rank && b.name == name) return b.elems;
  throw UserError(fmt::format("collective '{}': rank {} has no buffer '{}'", c.name, rank, name));
}

[[noreturn]] void bad_size(const Collective& c, std::uint64_t send, std::uint64_t recv, const std::string& want) {
  throw UserError(
      fmt::format("collective '{}' ({} over {} ranks): buffers '{}' ({} elements in use) and '{}' ({}) "
                  "do not fit: {}",
                  c.name, to_string(c.op), c.group.size(), c.send_buf, send, c.recv_buf, recv, want));
}

Ref plus(Ref r, std::uint64_t n) {
  r.off += n;
  return r;
}

Step copy(const Ref& src, const Ref& dst, std::uint64_t n) {
  Step s;
  s.kind = StepKind::copy, s.src = src, s.dst = dst, s.count = n;
  return s;
}
Step send(const Ref& src, std::uint64_t n, int peer) {
  Step s;
  s.kind = StepKind::send, s.src = src, s.count = n, s.peer = peer;
  return s;
}
Step recv(const Ref& dst, std::uint64_t n, int peer) {
  Step s;
  s.kind = StepKind::recv, s.dst = dst, s.count = n, s.peer = peer;
  return s;
}

}  // namespace

std::vector<int> comm_members(const Collective& c, CommKind k, int m) {
  const int p = static_cast<int>(c.group.size());
  const int G = c.inner > 0 ? c.inner : p, W = p / G;
  std::vector<int> v;
  if (k == CommKind::group)
    for (int q = 0; q < p; ++q) v.push_back(q);
  else if (k == CommKind::inner)
    for (int l = 0; l < G; ++l) v.push_back((m / G) * G + l);
  else
    for (int b = 0; b < W; ++b) v.push_back(b * G + m % G);
  return v;
}

std::vector<int> comm_ranks(const Collective& c, CommKind k, int m) {
  std::vector<int> v;
  for (int q : comm_members(c, k, m)) v.push_back(c.group[q]);
  return v;
}

int comm_rank(const Collective& c, CommKind k, int m) {
  const int G = c.inner > 0 ? c.inner : static_cast<int>(c.group.size());
  return k == CommKind::group ? m : k == CommKind::inner ? m % G : m / G;
}

std::vector<MemberPlan> plan_collective(const TaskGraph& g, const Collective& c) {
  if (c.send_buf.empty() || c.recv_buf.empty())
    throw UserError(fmt::format("collective '{}': no send_buf/recv_buf: it cannot be executed", c.name));
  if (c.op == CollOp::alltoallv)
    throw UserError(fmt::format("collective '{}': alltoallv is not executable on the device backends yet", c.name));
  const std::uint64_t p = c.group.size();
  const std::uint64_t row = c.row ? c.row : 1;
  const std::uint64_t c0 = c.col_count ? c.col_begin : 0, cw = c.col_count ? c.col_count : row;
  if (c0 + cw > row)
    throw UserError(fmt::format("collective '{}': columns [{}, {}) outside rows of {}", c.name, c0, c0 + cw, row));
  const bool windowed = cw != row;

  // The windowed element counts every member uses: wsn sent, wrn received.
  std::uint64_t wsn = 0, wrn = 0, sn_rows = 0, rn_rows = 0;
  std::vector<std::uint64_t> offsets(p);
  for (std::uint64_t mi = 0; mi < p; ++mi) {
    const int r = c.group[mi];
    const std::uint64_t s = size_of(g, r, c.send_buf, c), d = size_of(g, r, c.recv_buf, c);
    const std::uint64_t offset = c.member_send_offset.empty() ? c.send_offset : c.member_send_offset.at(mi);
    if (offset > s)
      throw UserError(fmt::format("collective '{}': send_offset {} beyond buffer '{}' ({} elements) on rank {}", c.name,
                                  offset, c.send_buf, s, r));
    if (c.send_count > s - offset)
      throw UserError(fmt::format("collective '{}': send_count {} beyond buffer '{}' on rank {}", c.name, c.send_count,
                                  c.send_buf, r));
    const std::uint64_t sn = c.send_count ? c.send_count : s - offset;
    if (sn % row || d % row)
      throw UserError(
          fmt::format("collective '{}': buffers '{}' ({}) and '{}' ({}) on rank {} are not whole rows of {} elements",
                      c.name, c.send_buf, sn, c.recv_buf, d, r, row));
    if (mi > 0 && (sn / row != sn_rows || d / row != rn_rows))
      throw UserError(
          fmt::format("collective '{}': buffer sizes differ between ranks {} and {}", c.name, c.group[0], r));
    sn_rows = sn / row, rn_rows = d / row;
    wsn = sn_rows * cw, wrn = rn_rows * cw;
    offsets[mi] = offset;
  }

  std::vector<MemberPlan> plans(p);
  for (std::uint64_t mi = 0; mi < p; ++mi) {
    MemberPlan& mp = plans[mi];
    mp.rank = c.group[mi];
    const Ref send_at{c.send_buf, offsets[mi]};
    Ref src = send_at, dst{c.recv_buf, 0};
    std::uint64_t received = wrn;  // elements the unpack moves
    const bool sends = c.op != CollOp::sendrecv || mi == 0, receives = c.op != CollOp::sendrecv || mi == 1;
    if (windowed) {
      Phase pack;
      if (sends) {
        Step s;
        s.kind = StepKind::copy2d, s.src = plus(send_at, c0), s.dst = {kStageSend, 0}, s.count = cw;
        s.rows = sn_rows, s.spitch = row, s.dpitch = cw;
        pack.steps.push_back(s);
        mp.stage_send = wsn;
      }
      mp.phases.push_back(pack);
      src = {kStageSend, 0};
      dst = {kStageRecv, 0};
      if (receives) mp.stage_recv = wrn;
    }
    auto coll = [&](PhaseKind k, std::uint64_t n) {
      Phase ph;
      ph.kind = k, ph.src = src, ph.dst = dst, ph.count = n;
      mp.phases.push_back(ph);
    };
    switch (c.op) {
      case CollOp::allreduce:
        if (wsn != wrn) bad_size(c, wsn, wrn, "send and receive the same size");
        coll(PhaseKind::allreduce, wsn);
        break;
      case CollOp::allgather:
        if (wrn != wsn * p) bad_size(c, wsn, wrn, fmt::format("receive = {} x send", p));
        coll(PhaseKind::allgather, wsn);
        break;
      case CollOp::reducescatter:
        if (wsn != wrn * p) bad_size(c, wsn, wrn, fmt::format("send = {} x receive", p));
        coll(PhaseKind::reducescatter, wrn);
        break;
      case CollOp::alltoall: {
        if (wsn != wrn || wsn % p) bad_size(c, wsn, wrn, fmt::format("send = receive, divisible by {}", p));
        const std::uint64_t blk = wsn / p;
        Phase self, rest;
        self.steps.push_back(copy(plus(src, mi * blk), plus(dst, mi * blk), blk));
        rest.kind = PhaseKind::p2p;
        for (std::uint64_t q = 0; q < p; ++q)
          if (q != mi) {
            rest.steps.push_back(send(plus(src, q * blk), blk, static_cast<int>(q)));
            rest.steps.push_back(recv(plus(dst, q * blk), blk, static_cast<int>(q)));
          }
        mp.phases.push_back(self);
        mp.phases.push_back(rest);
        break;
      }
      case CollOp::sendrecv: {
        if (p != 2) throw UserError(fmt::format("collective '{}': sendrecv needs 2 members, it has {}", c.name, p));
        if (wsn > wrn) bad_size(c, wsn, wrn, "receive at least as large as send");
        Phase ph;
        ph.kind = PhaseKind::p2p;
        if (mi == 0) ph.steps.push_back(send(src, wsn, 1));
        if (mi == 1) ph.steps.push_back(recv(dst, wsn, 0));
        mp.phases.push_back(ph);
        received = mi == 1 ? wsn : 0;
        break;
      }
      case CollOp::saa: {
        // W rounds, as the simulator's algorithm: round i sends this member's
        // chunk for outer block (blk + i) over the outer group (lane 0), and
        // passes the chunk that arrived to the inner group (lane 1) while the
        // next round goes on. Result: AllGather_inner(AlltoAll_outer(send)).
        const std::uint64_t G = c.inner > 0 ? static_cast<std::uint64_t>(c.inner) : 0;
        if (G == 0 || p % G)
          throw UserError(fmt::format("collective '{}': saa needs an inner size dividing {}", c.name, p));
        const std::uint64_t W = p / G;
        if (wsn % W || wrn != wsn * G)
          bad_size(c, wsn, wrn, fmt::format("send divisible by {}, receive = {} x send", W, G));
        const std::uint64_t chunk = wsn / W, blk = mi / G, l = mi % G;
        for (std::uint64_t i = 0; i < W; ++i) {
          const std::uint64_t to = (blk + i) % W, from = (blk + W - i) % W;
          Phase outer;
          outer.comm = CommKind::outer;
          if (i == 0) {
            outer.steps.push_back(copy(plus(src, blk * chunk), plus(dst, l * wsn + blk * chunk), chunk));
          } else {
            outer.kind = PhaseKind::p2p;
            outer.steps.push_back(send(plus(src, to * chunk), chunk, static_cast<int>(to)));
            outer.steps.push_back(recv(plus(dst, l * wsn + from * chunk), chunk, static_cast<int>(from)));
          }
          mp.phases.push_back(outer);
          if (G == 1) continue;
          Phase inner;
          inner.kind = PhaseKind::p2p, inner.lane = 1, inner.comm = CommKind::inner;
          inner.after = static_cast<int>(mp.phases.size()) - 1;
          for (std::uint64_t l2 = 0; l2 < G; ++l2)
            if (l2 != l) {
              inner.steps.push_back(send(plus(dst, l * wsn + from * chunk), chunk, static_cast<int>(l2)));
              inner.steps.push_back(recv(plus(dst, l2 * wsn + from * chunk), chunk, static_cast<int>(l2)));
            }
          mp.phases.push_back(inner);
        }
        break;
      }
      case CollOp::alltoallv:
        break;  // refused above
    }
    if (windowed) {
      Phase unpack;
      if (mp.phases.back().lane == 1) unpack.after = static_cast<int>(mp.phases.size()) - 1;
      if (receives && received) {
        Step s;
        s.kind = StepKind::copy2d, s.src = {kStageRecv, 0}, s.dst = {c.recv_buf, c0}, s.count = cw;
        s.rows = received / cw, s.spitch = cw, s.dpitch = row;
        unpack.steps.push_back(s);
      }
      mp.phases.push_back(unpack);
    }
  }
  return plans;
}

void run_phases(const Collective& c, const std::vector<MemberPlan>& plans, Mover& mv) {
  const std::size_t p = plans.size(), n = plans.empty() ? 0 : plans[0].phases.size();
  for (const auto& mp : plans)
    if (mp.phases.size() != n) throw UserError(fmt::format("collective '{}': members have different plans", c.name));
  for (std::size_t j = 0; j < n; ++j) {
    const Phase& ph0 = plans[0].phases[j];
    switch (ph0.kind) {
      case PhaseKind::local:
        for (const auto& mp : plans)
          for (const Step& s : mp.phases[j].steps) {
            if (s.kind == StepKind::copy) mv.copy(mp.rank, s.dst, mp.rank, s.src, s.count);
            if (s.kind == StepKind::copy2d)
              mv.copy2d(mp.rank, s.dst, s.dpitch, mp.rank, s.src, s.spitch, s.count, s.rows);
          }
        break;
      case PhaseKind::allreduce:
        mv.acc_zero(ph0.count);
        for (const auto& mp : plans) mv.acc_add(mp.rank, mp.phases[j].src, ph0.count);
        for (const auto& mp : plans) mv.acc_store(mp.rank, mp.phases[j].dst, ph0.count);
        break;
      case PhaseKind::allgather:
        for (const auto& d : plans)
          for (std::size_t m = 0; m < p; ++m)
            mv.copy(d.rank, plus(d.phases[j].dst, m * ph0.count), plans[m].rank, plans[m].phases[j].src, ph0.count);
        break;
      case PhaseKind::reducescatter:
        for (std::size_t d = 0; d < p; ++d) {
          mv.acc_zero(ph0.count);
          for (const auto& mp : plans) mv.acc_add(mp.rank, plus(mp.phases[j].src, d * ph0.count), ph0.count);
          mv.acc_store(plans[d].rank, plans[d].phases[j].dst, ph0.count);
        }
        break;
      case PhaseKind::p2p: {
        // The n-th send from member m to member q meets the n-th receive at q from m.
        std::map<std::pair<std::size_t, std::size_t>, std::vector<const Step*>> sends, recvs;
        for (std::size_t m = 0; m < p; ++m) {
          const Phase& ph = plans[m].phases[j];
          const std::vector<int> members = comm_members(c, ph.comm, static_cast<int>(m));
          for (const Step& s : ph.steps) {
            const std::size_t q = static_cast<std::size_t>(members.at(s.peer));
            if (s.kind == StepKind::send) sends[{m, q}].push_back(&s);
            if (s.kind == StepKind::recv) recvs[{q, m}].push_back(&s);
          }
        }
        for (const auto& [key, ss] : sends) {
          const auto it = recvs.find(key);
          if (it == recvs.end() || it->second.size() != ss.size())
            throw UserError(fmt::format("collective '{}': unmatched send from member {} to member {}", c.name,
                                        key.first, key.second));
          for (std::size_t i = 0; i < ss.size(); ++i) {
            const Step& r = *it->second[i];
            if (r.count != ss[i]->count)
              throw UserError(fmt::format("collective '{}': send of {} elements meets a receive of {}", c.name,
                                          ss[i]->count, r.count));
            mv.copy(plans[key.second].rank, r.dst, plans[key.first].rank, ss[i]->src, r.count);
          }
          recvs.erase(it);
        }
        if (!recvs.empty())
          throw UserError(
              fmt::format("collective '{}': a receive at member {} has no send", c.name, recvs.begin()->first.second));
        break;
      }
    }
  }
}

}  // namespace parmsim::exec::dev
