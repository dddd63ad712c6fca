// Running a pipeline schedule over Tide (train/pipeline_run.h).
#include "train/pipeline_run.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "io/error.h"
#include "train/comm.h"

namespace tide_train {

using pipeline::Action;
using pipeline::Op;
using Clock = std::chrono::steady_clock;

PipelineRunner::PipelineRunner(pipeline::Schedule schedule, int pp_rank, tideComm_t pp,
                               std::vector<GPT*> chunks, std::vector<int> world_rank)
    : s_(std::move(schedule)),
      me_(pp_rank),
      pp_(pp),
      chunks_(std::move(chunks)),
      world_(std::move(world_rank)) {
  const size_t tokens = chunks_.front()->tokens();
  inputs_.resize(tokens);
  targets_.resize(tokens);
  // Every direction some rank sends in, in one order on every rank (the
  // splits are collective over the pipeline group).
  std::set<std::pair<int, int>> edges;
  for (size_t r = 0; r < s_.rank.size(); ++r)
    for (const Action& a : s_.rank[r])
      if (a.op == Op::kSend) edges.emplace(static_cast<int>(r), a.peer);
  for (const auto& [from, to] : edges) {
    const bool in = me_ == from || me_ == to;
    tideComm_t c = nullptr;
    check_tide(tideCommSplit(pp_, in ? 0 : TIDE_SPLIT_NOCOLOR, me_ == from ? 0 : 1, &c, nullptr),
               pp_,
               "making the pipeline channel " + std::to_string(from) + " -> " + std::to_string(to));
    if (me_ == from) out_[to] = std::make_unique<Channel>(c, 1, true, peer_name(to));
    if (me_ == to) in_[from] = std::make_unique<Channel>(c, 0, false, peer_name(from));
  }
}

PipelineRunner::~PipelineRunner() = default;

std::string PipelineRunner::peer_name(int q) const {
  std::string n = "pipeline rank " + std::to_string(q);
  if (q < static_cast<int>(world_.size())) n += " (rank " + std::to_string(world_[q]) + ")";
  return n;
}

GPT* PipelineRunner::head_chunk() const {
  const int last = s_.stages() - 1;
  return s_.rank_of(last) == me_ ? chunks_[static_cast<size_t>(last / s_.p)] : nullptr;
}

// Every receive of the step, posted in the rank's schedule order (the order
// its peers send in), into a buffer of its own.
void PipelineRunner::post_receives(const std::vector<Action>& acts) {
  for (const Action& a : acts) {
    if (a.op != Op::kRecv) continue;
    const int stage = a.msg.grad ? a.msg.stage - 1 : a.msg.stage + 1;
    GPT* gpt = chunks_[static_cast<size_t>(stage / s_.p)];
    Inbox& box = inbox_[{a.msg.grad, a.msg.stage, a.msg.mb}];
    box.data.resize(gpt->activation_floats());
    box.peer = a.peer;
    box.pending = true;
    box.ticket = in_.at(a.peer)->receive(box.data.data(), box.data.size());
  }
}

const float* PipelineRunner::received(const Key& k) {
  Inbox& box = inbox_.at(k);
  in_.at(box.peer)->wait(box.ticket);
  return box.data.data();
}

void PipelineRunner::send(const Action& a) {
  const int chunk = a.msg.stage / s_.p, mb = a.msg.mb;
  GPT* gpt = chunks_[static_cast<size_t>(chunk)];
  Channel& ch = *out_.at(a.peer);
  if (!a.msg.grad) {
    const size_t t = ch.send(gpt->output(slot_.at({chunk, mb})), gpt->activation_floats());
    act_sent_[{chunk, mb}] = {a.peer, t};
  } else {
    auto& d = dsend_.at({a.msg.stage, mb});
    ch.send(d.data(), d.size());
  }
}

void PipelineRunner::compute(const Action& a, const Loader& load, float scale, double* loss) {
  const int P = s_.p, S = s_.stages(), chunk = a.stage / P;
  GPT* gpt = chunks_[static_cast<size_t>(chunk)];
  const std::pair<int, int> key{chunk, a.mb};
  static const std::function<void(int)> kNone = [](int) {};
  auto release = [&](int slot) {
    auto it = act_sent_.find(key);
    if (it != act_sent_.end()) {  // the slot's output may still be on its way out
      out_.at(it->second.first)->wait(it->second.second);
      act_sent_.erase(it);
    }
    gpt->release(slot);
    slot_.erase(key);
  };
  switch (a.op) {
    case Op::kForward: {
      const float* in = a.stage > 0 ? received({false, a.stage - 1, a.mb}) : nullptr;
      const int slot = gpt->acquire();
      slot_[key] = slot;
      if (in != nullptr) {
        std::copy(in, in + gpt->activation_floats(), gpt->input(slot));
        inbox_.at({false, a.stage - 1, a.mb}).pending = false;
      }
      const StageSpec& st = gpt->stage();
      if (st.embed || st.head) load(a.mb, inputs_.data(), targets_.data());
      *loss += gpt->forward(slot, inputs_.data(), st.head ? targets_.data() : nullptr);
      break;
    }
    case Op::kBackward:
    case Op::kBackwardInput: {
      const int slot = slot_.at(key);
      const Key dk{true, a.stage + 1, a.mb};
      const float* dout = a.stage == S - 1 ? nullptr : received(dk);
      gpt->backward(slot, dout, scale, a.op == Op::kBackward ? Pass::kFull : Pass::kInput, kNone);
      if (dout != nullptr) inbox_.at(dk).pending = false;
      if (a.stage > 0) {
        const float* g = gpt->input_grad();
        dsend_[{a.stage, a.mb}].assign(g, g + gpt->activation_floats());
      }
      if (a.op == Op::kBackward) release(slot);
      break;
    }
    case Op::kBackwardWeight: {
      const int slot = slot_.at(key);
      gpt->backward(slot, nullptr, scale, Pass::kWeight, kNone);
      release(slot);
      break;
    }
    default:
      break;
  }
}

double PipelineRunner::step(const Loader& load, float scale, Clock::time_point origin,
                            Timing* timing) {
  const std::vector<Action>& acts = s_.rank[static_cast<size_t>(me_)];
  double loss = 0.0;
  Timing t;
  bool first = true;
  auto since = [&](Clock::time_point x) {
    return std::chrono::duration<double>(x - origin).count();
  };
  post_receives(acts);
  for (const Action& a : acts) {
    if (a.op == Op::kSend) {
      send(a);
      continue;
    }
    if (a.op == Op::kRecv) continue;  // posted above; waited for by the compute that needs it
    // A compute's wait for its message is idle time, not busy.
    if (a.op == Op::kForward && a.stage > 0) received({false, a.stage - 1, a.mb});
    if ((a.op == Op::kBackward || a.op == Op::kBackwardInput) && a.stage < s_.stages() - 1)
      received({true, a.stage + 1, a.mb});
    const auto t0 = Clock::now();
    compute(a, load, scale, &loss);
    const auto t1 = Clock::now();
    if (first) t.start = since(t0);
    first = false;
    t.end = since(t1);
    t.busy += std::chrono::duration<double>(t1 - t0).count();
    int held = 0;
    for (GPT* g : chunks_) held += g->slots_in_use();
    t.peak_slots = std::max(t.peak_slots, held);
  }
  for (auto& [peer, ch] : out_) ch->drain();
  const bool unread =
      std::any_of(inbox_.begin(), inbox_.end(), [](const auto& kv) { return kv.second.pending; });
  if (!slot_.empty() || unread || !act_sent_.empty())
    throw Error("pipeline schedule left " + std::to_string(slot_.size()) +
                " micro-batches' activations behind (a schedule bug)");
  if (timing != nullptr) *timing = t;
  return loss;
}

double PipelineRunner::forward_only(const int* inputs, const int* targets) {
  const int P = s_.p, S = s_.stages();
  double loss = 0.0;
  for (int s = 0; s < S; ++s) {
    if (s_.rank_of(s) != me_) continue;
    GPT* gpt = chunks_[static_cast<size_t>(s / P)];
    const size_t n = gpt->activation_floats();
    if (s > 0)
      check_tide(tideRecv(gpt->input(0), n, tideFloat32, s_.rank_of(s - 1), pp_, nullptr), pp_,
                 "pipeline receive from stage rank " + std::to_string(s_.rank_of(s - 1)));
    loss += gpt->forward(0, inputs, s == S - 1 ? targets : nullptr);
    if (s < S - 1)
      check_tide(tideSend(gpt->output(0), n, tideFloat32, s_.rank_of(s + 1), pp_, nullptr), pp_,
                 "pipeline send to stage rank " + std::to_string(s_.rank_of(s + 1)));
  }
  return loss;
}

}  // namespace tide_train
