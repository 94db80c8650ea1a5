// Test-only schedule interpreter (see interpreter.hpp).
#include "schedule/interpreter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

namespace wallfacer::testing {

namespace {

using Bits = uint64_t;
Bits bit(int64_t i) {
  return Bits(1) << i;
}

// Symbolic contents of one (field, head) of a row. Presence-only fields (Q, K, V, dO) use
// `present`; O, Lse, D, dQ hold the keys merged (words[0]); dK, dV one word of queries per query
// head of the kv head's group.
struct Value {
  bool present = false;
  std::vector<Bits> words;
};

struct Row {
  std::map<std::pair<int, int>, Value> values;  // (field, global head) -> value
};

struct BufferState {
  bool overwritten = false;
  std::map<int64_t, Row> rows;
};

struct RankState {
  std::vector<BufferState> buffers;
  std::vector<bool> done;
  std::vector<std::vector<int32_t>> streams;  // op indices per stream
  size_t head[kNumStreams] = {};
};

class Interpreter {
 public:
  Interpreter(const Plan& plan, const Schedule& schedule) : plan_(plan), s_(schedule), dims_(schedule.dims) {
    group_size_ = dims_.heads / dims_.kv_heads;
    for (const auto& prog : s_.ranks) {
      RankState st;
      st.buffers.resize(prog.buffers.size());
      st.done.assign(prog.ops.size(), false);
      st.streams.resize(kNumStreams);
      for (size_t i = 0; i < prog.ops.size(); ++i)
        st.streams[size_t(prog.ops[i].stream)].push_back(int32_t(i));
      for (const auto& in : prog.inputs)
        bind_input(st, prog, in);
      state_.push_back(std::move(st));
    }
  }

  RunResult run(Order order) {
    while (errors_.size() < kMaxErrors) {
      bool progress = false;
      if (order == Order::CommunicationFirst) {
        while (communicate())
          progress = true;
        progress |= compute();
      } else {
        while (compute())
          progress = true;
        progress |= communicate();
      }
      if (!progress) break;
    }
    RunResult result;
    result.ops_run = ops_run_;
    result.completed = all_done();
    if (!result.completed && errors_.empty()) report_deadlock();
    if (result.completed && errors_.empty()) check_outputs();
    result.errors = errors_;
    return result;
  }

 private:
  static constexpr size_t kMaxErrors = 12;

  void error(const std::string& msg) {
    if (errors_.size() < kMaxErrors) errors_.push_back(msg);
  }
  const TokenSet& tokens(int32_t id) const { return s_.tokens.get(id); }
  static std::vector<int64_t> list(const TokenSet& set) {
    std::vector<int64_t> out;
    for (const auto& r : set)
      for (int64_t t = r.begin; t < r.end; ++t)
        out.push_back(t);
    return out;
  }
  bool accumulator(Field f) const {
    return f == Field::O || f == Field::Lse || f == Field::D || f == Field::dQ || f == Field::dK || f == Field::dV;
  }
  Bits full_keys(int64_t q) const {
    const int64_t n = dims_.causal ? q + 1 : dims_.seq;
    return n >= 64 ? ~Bits(0) : bit(n) - 1;
  }
  Bits full_queries(int64_t k) const {
    const Bits all = dims_.seq >= 64 ? ~Bits(0) : bit(dims_.seq) - 1;
    return dims_.causal ? all & ~(bit(k) - 1) : all;
  }
  int words_of(Field f) const {
    if (f == Field::dK || f == Field::dV) return group_size_;
    return accumulator(f) ? 1 : 0;
  }
  std::string where(int rank, int32_t op) const {
    const Op& o = s_.ranks[size_t(rank)].ops[size_t(op)];
    return fmt::format("rank {} op {} ({} step {})", rank, op, to_string(o.kind), o.step);
  }

  void bind_input(RankState& st, const RankProgram& prog, const Binding& in) {
    if (in.field == Field::WeightGrad) return;
    auto& buf = st.buffers[size_t(in.buf)];
    buf.overwritten = true;
    for (int64_t t : list(tokens(in.tokens)))
      for (int h = in.heads.begin; h < in.heads.end; ++h)
        buf.rows[t].values[{int(in.field), h}].present = true;
  }

  // A row value that must exist (reads).
  const Value* read(int rank, int32_t buf, int64_t t, Field f, int head, const std::string& ctx) {
    auto& b = state_[size_t(rank)].buffers[size_t(buf)];
    const auto& decl = s_.ranks[size_t(rank)].buffers[size_t(buf)];
    if (head < decl.heads.begin || head >= decl.heads.end) {
      error(fmt::format("{}: head {} outside buffer '{}' heads", ctx, head, decl.name));
      return nullptr;
    }
    auto row = b.rows.find(t);
    if (row != b.rows.end()) {
      auto v = row->second.values.find({int(f), head});
      if (v != row->second.values.end() && v->second.present) return &v->second;
    }
    if (accumulator(f) && !b.overwritten && f != Field::D) {  // never written: zero
      static const Value zero{true, {}};
      return &zero;
    }
    error(fmt::format("{}: buffer '{}' holds no {} for token {} head {}", ctx, decl.name, to_string(f), t, head));
    return nullptr;
  }

  // A row value to update in place (accumulation), created as zero in a never-overwritten buffer.
  Value* update(int rank, int32_t buf, int64_t t, Field f, int head, const std::string& ctx) {
    auto& b = state_[size_t(rank)].buffers[size_t(buf)];
    const auto& decl = s_.ranks[size_t(rank)].buffers[size_t(buf)];
    if (head < decl.heads.begin || head >= decl.heads.end) {
      error(fmt::format("{}: head {} outside buffer '{}' heads", ctx, head, decl.name));
      return nullptr;
    }
    auto row = b.rows.find(t);
    if (row == b.rows.end() && b.overwritten) {
      error(fmt::format("{}: buffer '{}' has no row for token {}", ctx, decl.name, t));
      return nullptr;
    }
    Value& v = b.rows[t].values[{int(f), head}];
    if (!v.present) {
      v.present = true;
      v.words.assign(size_t(words_of(f)), 0);
    }
    check_capacity(rank, buf, ctx);
    return &v;
  }

  void check_capacity(int rank, int32_t buf, const std::string& ctx) {
    const auto& decl = s_.ranks[size_t(rank)].buffers[size_t(buf)];
    if (int64_t(state_[size_t(rank)].buffers[size_t(buf)].rows.size()) > decl.capacity_tokens)
      error(fmt::format("{}: buffer '{}' exceeds its capacity of {} tokens", ctx, decl.name, decl.capacity_tokens));
  }

  static void add_bits(Value& v, size_t word, Bits b, const std::function<void()>& twice) {
    if (v.words[word] & b) twice();
    v.words[word] |= b;
  }

  // ---- local ops -------------------------------------------------------------------------------
  void attn_fwd(int rank, int32_t index, const Op& op) {
    const std::string ctx = where(rank, index);
    const auto qs = list(tokens(op.tok[0])), ks = list(tokens(op.tok[1]));
    for (int h = op.heads.begin; h < op.heads.end; ++h) {
      const int kvh = h / group_size_;
      for (int64_t k : ks) {
        read(rank, op.buf[1], k, Field::K, kvh, ctx);
        read(rank, op.buf[1], k, Field::V, kvh, ctx);
      }
      for (int64_t q : qs) {
        read(rank, op.buf[0], q, Field::Q, h, ctx);
        Bits keys = 0;
        for (int64_t k : ks) {
          if (dims_.causal && k > q && op.mask == Mask::None)
            error(fmt::format("{}: dead pair (q {}, k {}) computed without the mask", ctx, q, k));
          if (!dims_.causal || k <= q) keys |= bit(k);
        }
        for (Field f : {Field::O, Field::Lse})
          if (Value* v = update(rank, op.buf[2], q, f, h, ctx))
            add_bits(*v, 0, keys, [&] { error(fmt::format("{}: query {} head {} merges a key twice", ctx, q, h)); });
      }
    }
  }

  void attn_bwd(int rank, int32_t index, const Op& op) {
    const std::string ctx = where(rank, index);
    const auto qs = list(tokens(op.tok[0])), ks = list(tokens(op.tok[1]));
    for (int h = op.heads.begin; h < op.heads.end; ++h) {
      const int kvh = h / group_size_;
      for (int64_t q : qs) {
        read(rank, op.buf[0], q, Field::Q, h, ctx);
        read(rank, op.buf[0], q, Field::dO, h, ctx);
        for (Field f : {Field::Lse, Field::D}) {
          const Value* v = read(rank, op.buf[0], q, f, h, ctx);
          if (v && (v->words.empty() || v->words[0] != full_keys(q)))
            error(fmt::format("{}: {} of query {} head {} is not final", ctx, to_string(f), q, h));
        }
      }
      for (int64_t k : ks) {
        read(rank, op.buf[1], k, Field::K, kvh, ctx);
        read(rank, op.buf[1], k, Field::V, kvh, ctx);
      }
      for (int64_t q : qs) {
        Bits keys = 0;
        for (int64_t k : ks) {
          if (dims_.causal && k > q && op.mask == Mask::None)
            error(fmt::format("{}: dead pair (q {}, k {}) computed without the mask", ctx, q, k));
          if (dims_.causal && k > q) continue;
          keys |= bit(k);
          for (Field f : {Field::dK, Field::dV})
            if (Value* v = update(rank, op.buf[3], k, f, kvh, ctx))
              add_bits(*v, size_t(h - kvh * group_size_), bit(q),
                       [&] { error(fmt::format("{}: pair (q {}, k {}) head {} summed twice", ctx, q, k, h)); });
        }
        if (Value* v = update(rank, op.buf[2], q, Field::dQ, h, ctx))
          add_bits(*v, 0, keys, [&] { error(fmt::format("{}: dQ of query {} head {} sums a key twice", ctx, q, h)); });
      }
    }
  }

  void bwd_prep(int rank, int32_t index, const Op& op) {
    const std::string ctx = where(rank, index);
    for (int64_t q : list(tokens(op.tok[0])))
      for (int h = op.heads.begin; h < op.heads.end; ++h) {
        read(rank, op.buf[0], q, Field::dO, h, ctx);
        const Value* o = read(rank, op.buf[0], q, Field::O, h, ctx);
        if (!o || o->words.empty() || o->words[0] != full_keys(q)) {
          error(fmt::format("{}: O of query {} head {} is not final", ctx, q, h));
          continue;
        }
        state_[size_t(rank)].buffers[size_t(op.buf[0])].rows[q].values[{int(Field::D), h}] = *o;
      }
  }

  // Overwrites `fields` of rows `toks` x `heads` of buffer `buf` with `values`; rows not listed
  // leave the buffer.
  void overwrite(int rank, int32_t buf, const std::vector<int64_t>& toks, FieldMask fields, HeadRange heads,
                 const std::map<std::pair<int64_t, std::pair<int, int>>, Value>& values, const std::string& ctx) {
    auto& b = state_[size_t(rank)].buffers[size_t(buf)];
    const auto& decl = s_.ranks[size_t(rank)].buffers[size_t(buf)];
    if (heads.begin < decl.heads.begin || heads.end > decl.heads.end)
      error(fmt::format("{}: heads [{}, {}) outside buffer '{}'", ctx, heads.begin, heads.end, decl.name));
    std::map<int64_t, Row> rows;
    for (int64_t t : toks) {
      auto old = b.rows.find(t);
      if (old != b.rows.end()) rows[t] = old->second;
      for (int f = 0; f < kNumFields; ++f) {
        if (!(fields & (1u << f))) continue;
        for (int h = heads.begin; h < heads.end; ++h) {
          auto it = values.find({t, {f, h}});
          if (it == values.end()) {
            error(fmt::format("{}: nothing delivered for token {} {} head {}", ctx, t, to_string(Field(f)), h));
            continue;
          }
          rows[t].values[{f, h}] = it->second;
        }
      }
    }
    b.rows = std::move(rows);
    b.overwritten = true;
    check_capacity(rank, buf, ctx);
  }

  void gather(int rank, int32_t buf, const std::vector<int64_t>& toks, FieldMask fields, HeadRange heads,
              std::map<std::pair<int64_t, std::pair<int, int>>, Value>& out, bool sum, const std::string& ctx) {
    for (int64_t t : toks)
      for (int f = 0; f < kNumFields; ++f) {
        if (!(fields & (1u << f))) continue;
        for (int h = heads.begin; h < heads.end; ++h) {
          const Value* v = read(rank, buf, t, Field(f), h, ctx);
          if (!v) continue;
          Value val = *v;
          if (val.words.empty()) val.words.assign(size_t(words_of(Field(f))), 0);
          auto [it, fresh] = out.try_emplace({t, {f, h}}, val);
          if (fresh) continue;
          if (!sum) {
            error(fmt::format("{}: token {} head {} delivered twice", ctx, t, h));
            continue;
          }
          for (size_t w = 0; w < it->second.words.size(); ++w) {
            if (it->second.words[w] & val.words[w])
              error(fmt::format("{}: reduction sums a contribution twice (token {} head {})", ctx, t, h));
            it->second.words[w] |= val.words[w];
          }
        }
      }
  }

  void copy(int rank, int32_t index, const Op& op) {
    const std::string ctx = where(rank, index);
    std::map<std::pair<int64_t, std::pair<int, int>>, Value> values;
    const auto toks = list(tokens(op.tok[0]));
    gather(rank, op.buf[0], toks, op.fields, op.heads, values, false, ctx);
    overwrite(rank, op.buf[1], toks, op.fields, op.heads, values, ctx);
  }

  bool compute() {
    bool progress = false;
    for (size_t r = 0; r < state_.size(); ++r) {
      auto& st = state_[r];
      auto& queue = st.streams[size_t(Stream::Compute)];
      while (st.head[0] < queue.size() && ready(int(r), queue[st.head[0]])) {
        const int32_t i = queue[st.head[0]];
        const Op& op = s_.ranks[r].ops[size_t(i)];
        switch (op.kind) {
          case OpKind::AttnFwd:
            attn_fwd(int(r), i, op);
            break;
          case OpKind::AttnBwd:
            attn_bwd(int(r), i, op);
            break;
          case OpKind::BwdPrep:
            bwd_prep(int(r), i, op);
            break;
          case OpKind::Copy:
            copy(int(r), i, op);
            break;
          default:
            error(fmt::format("{}: not a compute-stream op", where(int(r), i)));
        }
        finish(int(r), i);
        progress = true;
      }
    }
    return progress;
  }

  // ---- communication ---------------------------------------------------------------------------
  bool ready(int rank, int32_t op) const {
    const auto& prog = s_.ranks[size_t(rank)];
    const Op& o = prog.ops[size_t(op)];
    for (const int32_t* d = prog.deps_begin(o); d != prog.deps_end(o); ++d)
      if (!state_[size_t(rank)].done[size_t(*d)]) return false;
    return true;
  }
  int32_t head_of(int rank, Stream s) const {
    const auto& st = state_[size_t(rank)];
    const auto& q = st.streams[size_t(s)];
    return st.head[int(s)] < q.size() ? q[st.head[int(s)]] : -1;
  }
  void finish(int rank, int32_t op) {
    auto& st = state_[size_t(rank)];
    st.done[size_t(op)] = true;
    ++st.head[int(s_.ranks[size_t(rank)].ops[size_t(op)].stream)];
    ++ops_run_;
  }

  bool communicate() {
    bool progress = false;
    for (size_t r = 0; r < state_.size(); ++r) {
      const int32_t send = head_of(int(r), Stream::Send);
      if (send >= 0 && ready(int(r), send)) progress |= try_transfer(int(r), send);
      const int32_t coll = head_of(int(r), Stream::Collective);
      if (coll >= 0 && ready(int(r), coll)) progress |= try_collective(int(r), coll);
    }
    return progress;
  }

  bool try_transfer(int rank, int32_t send_index) {
    const Op& send = s_.ranks[size_t(rank)].ops[size_t(send_index)];
    if (send.peer < 0 || size_t(send.peer) >= state_.size()) {
      error(fmt::format("{}: peer {} out of range", where(rank, send_index), send.peer));
      return false;
    }
    const int32_t recv_index = head_of(send.peer, Stream::Recv);
    if (recv_index < 0 || !ready(send.peer, recv_index)) return false;
    const Op& recv = s_.ranks[size_t(send.peer)].ops[size_t(recv_index)];
    if (recv.peer != rank || recv.tag != send.tag) return false;
    const std::string ctx = where(rank, send_index) + " -> " + where(send.peer, recv_index);
    if (recv.bytes != send.bytes || recv.tok[0] != send.tok[0] || recv.fields != send.fields ||
        recv.heads != send.heads)
      error(fmt::format("{}: send and receive disagree on bytes, tokens, fields or heads", ctx));
    if (s_.ranks[size_t(rank)].batch_begin != s_.ranks[size_t(send.peer)].batch_begin)
      error(fmt::format("{}: transfer between different batch ranges", ctx));
    std::map<std::pair<int64_t, std::pair<int, int>>, Value> values;
    const auto toks = list(tokens(send.tok[0]));
    gather(rank, send.buf[0], toks, send.fields, send.heads, values, false, ctx);
    overwrite(send.peer, recv.buf[0], toks, recv.fields, recv.heads, values, ctx);
    finish(rank, send_index);
    finish(send.peer, recv_index);
    return true;
  }

  bool try_collective(int rank, int32_t index) {
    const auto& prog = s_.ranks[size_t(rank)];
    const Op& op = prog.ops[size_t(index)];
    const CollectiveSpec& spec = prog.collectives[size_t(op.coll)];
    const auto& members = plan_.groups[size_t(spec.group)].ranks;
    if (members.empty() || members.front() != rank) return false;  // the first member drives
    std::vector<int32_t> ops;
    for (int m : members) {
      const int32_t i = head_of(m, Stream::Collective);
      if (i < 0 || !ready(m, i)) return false;
      const auto& mp = s_.ranks[size_t(m)];
      const CollectiveSpec& other = mp.collectives[size_t(mp.ops[size_t(i)].coll)];
      if (other.group != spec.group) return false;  // that member is in another collective first
      if (other.kind != spec.kind || other.fields != spec.fields || other.in_tokens != spec.in_tokens ||
          other.out_tokens != spec.out_tokens || other.in_heads != spec.in_heads || other.out_heads != spec.out_heads ||
          other.elements != spec.elements)
        error(fmt::format("{}: members of group {} disagree on the collective", where(m, i), spec.group));
      if (spec.kind != OpKind::AllReduce && mp.batch_begin != prog.batch_begin)
        error(fmt::format("{}: collective across different batch ranges", where(m, i)));
      ops.push_back(i);
    }
    if (spec.kind != OpKind::AllReduce) run_collective(spec, members, ops);
    for (size_t m = 0; m < members.size(); ++m)
      finish(members[m], ops[m]);
    return true;
  }

  void run_collective(const CollectiveSpec& spec, const std::vector<int>& members, const std::vector<int32_t>& ops) {
    const size_t p = members.size();
    for (size_t j = 0; j < p; ++j) {
      const std::string ctx = where(members[j], ops[j]);
      std::map<std::pair<int64_t, std::pair<int, int>>, Value> values;
      const auto out = list(tokens(spec.out_tokens[j]));
      for (size_t i = 0; i < p; ++i) {
        const Op& in_op = s_.ranks[size_t(members[i])].ops[size_t(ops[i])];
        TokenSet in_tokens = tokens(spec.in_tokens[i]);
        HeadRange heads = spec.in_heads[i];
        if (spec.kind != OpKind::AllGather) {
          heads = {std::max(heads.begin, spec.out_heads[j].begin), std::min(heads.end, spec.out_heads[j].end)};
          if (heads.size() <= 0) continue;
        }
        std::vector<int64_t> send;
        for (int64_t t : list(in_tokens))
          if (std::find(out.begin(), out.end(), t) != out.end()) send.push_back(t);
        gather(members[i], in_op.buf[0], send, spec.fields, heads, values, spec.kind == OpKind::ReduceScatter, ctx);
      }
      const Op& out_op = s_.ranks[size_t(members[j])].ops[size_t(ops[j])];
      overwrite(members[j], out_op.buf[1], out, spec.fields, spec.out_heads[j], values, ctx);
    }
  }

  bool all_done() const {
    for (const auto& st : state_)
      for (int s = 0; s < kNumStreams; ++s)
        if (st.head[s] < st.streams[size_t(s)].size()) return false;
    return true;
  }

  void report_deadlock() {
    std::string heads;
    int shown = 0;
    for (size_t r = 0; r < state_.size() && shown < 4; ++r)
      for (int s = 0; s < kNumStreams; ++s) {
        const int32_t i = head_of(int(r), Stream(s));
        if (i < 0) continue;
        heads += " [" + where(int(r), i) + (ready(int(r), i) ? " ready" : " waiting") + "]";
        ++shown;
      }
    error("deadlock: no op can run; blocked:" + heads);
  }

  // ---- outputs ---------------------------------------------------------------------------------
  void check_outputs() {
    // (field, batch, head, token) -> times bound
    std::map<std::tuple<int, int, int, int64_t>, int> seen;
    for (size_t r = 0; r < state_.size(); ++r) {
      const auto& prog = s_.ranks[r];
      for (const auto& out : prog.outputs) {
        if (out.field == Field::WeightGrad) continue;
        const std::string ctx = fmt::format("rank {} output {}", r, to_string(out.field));
        for (int64_t t : list(tokens(out.tokens)))
          for (int h = out.heads.begin; h < out.heads.end; ++h) {
            const Value* v = read(int(r), out.buf, t, out.field, h, ctx);
            if (v) check_final(out.field, t, h, *v, ctx);
            for (int b = prog.batch_begin; b < prog.batch_end; ++b)
              ++seen[{int(out.field), b, h, t}];
          }
      }
    }
    for (Field f : {Field::O, Field::Lse, Field::dQ, Field::dK, Field::dV}) {
      const int heads = is_query_class(f) ? dims_.heads : dims_.kv_heads;
      for (int b = 0; b < dims_.batch; ++b)
        for (int h = 0; h < heads; ++h)
          for (int64_t t = 0; t < dims_.seq; ++t) {
            auto it = seen.find({int(f), b, h, t});
            const int n = it == seen.end() ? 0 : it->second;
            if (n != 1)
              error(fmt::format("output {} batch {} head {} token {} provided {} times", to_string(f), b, h, t, n));
          }
    }
  }

  void check_final(Field f, int64_t t, int h, const Value& v, const std::string& ctx) {
    if (f == Field::dK || f == Field::dV) {
      for (int g = 0; g < group_size_; ++g)
        if (v.words.size() != size_t(group_size_) || v.words[size_t(g)] != full_queries(t))
          error(fmt::format("{}: token {} kv head {} misses query pairs of query head {}", ctx, t, h,
                            h * group_size_ + g));
      return;
    }
    if (v.words.empty() || v.words[0] != full_keys(t))
      error(fmt::format("{}: token {} head {} is incomplete", ctx, t, h));
  }

  const Plan& plan_;
  const Schedule& s_;
  ScheduleDims dims_;
  int group_size_ = 1;
  std::vector<RankState> state_;
  std::vector<std::string> errors_;
  int64_t ops_run_ = 0;
};

}  // namespace

std::string RunResult::summary() const {
  std::string out = fmt::format("completed={} ops_run={}", completed, ops_run);
  for (const auto& e : errors)
    out += "\n  " + e;
  return out;
}

RunResult run_schedule(const Plan& plan, const Schedule& schedule, Order order) {
  return Interpreter(plan, schedule).run(order);
}

}  // namespace wallfacer::testing
