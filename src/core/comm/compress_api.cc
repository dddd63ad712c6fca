// The compressed collectives' C API (include/tide/compress.h): compressor
// objects, argument checks, the compressor's fixed count, tideCodecAuto's
// per-call choice, and state save/restore. The calls are ordinary operations
// whose CollArgs carry a codec (core/codec.h); the planner routes them to the
// rows that serve it (algorithms/compression/).
#include <cmath>
#include <cstring>
#include <string>

#include "core/codec.h"
#include "core/comm/api_call.h"
#include "core/issue/enqueue.h"
#include "core/issue/planner.h"
#include "tide/compress.h"

using tide::Status;

struct tideCompressor {
  static constexpr uint32_t kMagic = 0x7dc0de17u;
  uint32_t magic = kMagic;
  tideComm* comm = nullptr;
  int codec = 0;  // tideCodec_t as configured (Auto resolves per call)
  tide::CodecParams params;
  void* state = nullptr;  // CodecProvider state
  // The first successful call fixes the collective and the count.
  bool fixed = false;
  tide::CollType kind = tide::CollType::AllReduce;
  size_t count = 0;
  // Auto's choice for (kind, count, autoDtype) on this compressor's
  // communicator, whose topology does not change: made once, not per call
  // (the cost model's predictions cost microseconds a latency-bound call
  // would pay every time).
  bool autoChosen = false;
  tideDataType_t autoDtype = tideFloat32;
  int autoId = 0;
};

namespace {

using tide::commCall;
using tide::guarded;
using tide::invalidArgument;

// The serialized state: this header, then the provider's bytes.
struct StateHeader {
  uint32_t magic = 0x53434454u;  // "TDCS"
  uint32_t version = 1;
  int32_t codec = 0;
  int32_t kind = -1;  // the fixed collective, or -1
  uint64_t count = 0;
  int32_t rank = 0;
  int32_t nranks = 0;
};

Status parseConfig(const tideCompressConfig_t* c, int* codec, tide::CodecParams* p) {
  if (c == nullptr) return invalidArgument("config is NULL");
  if (c->size < offsetof(tideCompressConfig_t, reserved) || c->size > sizeof(*c)) {
    return invalidArgument("config size %zu: not a tideCompressConfig_t (expected %zu)", c->size,
                           sizeof(*c));
  }
  int id;
  std::memcpy(&id, &c->codec, sizeof(id));
  if (id < tideCodecNone || id > tideCodecAuto) return invalidArgument("unknown codec %d", id);
  *codec = id;
  const int block = c->blockSize == TIDE_CONFIG_UNDEF_INT ? 256 : c->blockSize;
  if (block <= 0 || block > (1 << 20)) {
    return invalidArgument("blockSize %d out of range [1, 2^20]", c->blockSize);
  }
  p->block = static_cast<uint32_t>(block);
  if (std::isnan(c->topkRatio) || c->topkRatio > 1) {
    return invalidArgument("topkRatio %g out of range (0, 1]", c->topkRatio);
  }
  p->topkRatio = c->topkRatio <= 0 ? 0.01 : c->topkRatio;
  auto flag = [](int v, bool undef, const char* name, bool* out) -> Status {
    if (v == TIDE_CONFIG_UNDEF_INT) {
      *out = undef;
    } else if (v == 0 || v == 1) {
      *out = v == 1;
    } else {
      return invalidArgument("%s %d: 0 or 1", name, v);
    }
    return Status::Ok();
  };
  TIDE_TRY(flag(c->errorFeedback, true, "errorFeedback", &p->errorFeedback));
  TIDE_TRY(flag(c->stochasticRounding, false, "stochasticRounding", &p->stochastic));
  TIDE_TRY(flag(c->interNodeOnly, false, "interNodeOnly", &p->interNodeOnly));
  p->seed = c->seed;
  return Status::Ok();
}

Status checkLive(const tideCompressor* cmp) {
  if (cmp == nullptr) return invalidArgument("compressor is NULL");
  if (cmp->magic != tideCompressor::kMagic) return invalidArgument("not a live compressor");
  return Status::Ok();
}

Status checkCompressor(const tideCompressor* cmp, const tideComm* comm) {
  TIDE_TRY(checkLive(cmp));
  if (cmp->comm != comm) {
    return invalidArgument("compressor of communicator %08x used on communicator %08x",
                           static_cast<unsigned>(cmp->comm->commHash),
                           static_cast<unsigned>(comm->commHash));
  }
  return Status::Ok();
}

// One compressed call: checks, the fixed count, Auto's choice, then the
// operation itself (a plain one for tideCodecNone).
Status issueCompressed(tideComm* comm, tideStream* stream, tide::CollType type, const void* send,
                       void* recv, size_t count, tideDataType_t dtype, int op,
                       tideCompressor* cmp) {
  TIDE_TRY(checkCompressor(cmp, comm));
  int dt;
  std::memcpy(&dt, &dtype, sizeof(dt));
  if (dt != tideFloat32 && dt != tideBfloat16 && dt != tideFloat16) {
    return invalidArgument("%s: datatype %d not supported (float32, bfloat16, float16)",
                           tide::collName(type), dt);
  }
  if (type != tide::CollType::AllGather && op != tideSum && op != tideAvg) {
    return invalidArgument("%s: op %d not supported (sum, avg)", tide::collName(type), op);
  }
  if (cmp->fixed && (cmp->kind != type || cmp->count != count)) {
    return invalidArgument(
        "compressor was first used for %s of %zu elements; this call is %s of %zu elements (one "
        "compressor per logical buffer)",
        tide::collName(cmp->kind), cmp->count, tide::collName(type), count);
  }
  int id = cmp->codec;
  if (id == tideCodecAuto && cmp->autoChosen && cmp->autoDtype == dtype && cmp->fixed) {
    id = cmp->autoId;
  } else if (id == tideCodecAuto) {
    tide::CollArgs probe;
    probe.type = type;
    probe.count = count;
    probe.dtype = dtype;
    probe.elemSize = tide::dtypeSize(dtype);
    probe.codec.params = &cmp->params;
    probe.codec.state = cmp->state;
    id = tide::chooseCodec(probe, comm);
    cmp->autoChosen = true;
    cmp->autoDtype = dtype;
    cmp->autoId = id;
  }
  Status s;
  if (id == tideCodecNone) {
    s = tide::issueOp(comm, stream, type, send, recv, count, dt, op, 0);
  } else {
    tide::Codec c;
    c.id = id;
    c.params = &cmp->params;
    c.state = cmp->state;
    s = tide::issueOp(comm, stream, type, send, recv, count, dt, op, 0, &c);
  }
  if (s.ok() && count > 0) {
    cmp->fixed = true;
    cmp->kind = type;
    cmp->count = count;
  }
  return s;
}

}  // namespace

TIDE_API tideResult_t tideCompressorCreate(tideComm_t comm, const tideCompressConfig_t* config,
                                           tideCompressor_t* compressor) {
  return commCall("tideCompressorCreate", comm, [&]() -> Status {
    if (compressor == nullptr) return invalidArgument("compressor pointer is NULL");
    *compressor = nullptr;
    int codec = 0;
    tide::CodecParams params;
    TIDE_TRY(parseConfig(config, &codec, &params));
    const tide::CodecProvider* prov = tide::codecProvider();
    if (prov == nullptr) return tide::internalError("no codec provider is registered");
    auto* c = new tideCompressor();
    c->comm = comm;
    c->codec = codec;
    c->params = params;
    c->state = prov->newState();
    if (c->state == nullptr) {
      delete c;
      return tide::systemError("out of memory for a compressor");
    }
    *compressor = c;
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCompressorDestroy(tideCompressor_t compressor) {
  return guarded("tideCompressorDestroy", nullptr, [&]() -> Status {
    TIDE_TRY(checkLive(compressor));
    compressor->magic = 0;
    tide::codecProvider()->freeState(compressor->state);
    delete compressor;
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                              tideDataType_t datatype, tideRedOp_t op,
                                              tideCompressor_t compressor, tideComm_t comm,
                                              tideStream_t stream) {
  return commCall("tideAllReduceCompressed", comm, [&] {
    int o;
    std::memcpy(&o, &op, sizeof(o));
    return issueCompressed(comm, stream, tide::CollType::AllReduce, sendbuff, recvbuff, count,
                           datatype, o, compressor);
  });
}

TIDE_API tideResult_t tideReduceScatterCompressed(const void* sendbuff, void* recvbuff,
                                                  size_t recvcount, tideDataType_t datatype,
                                                  tideRedOp_t op, tideCompressor_t compressor,
                                                  tideComm_t comm, tideStream_t stream) {
  return commCall("tideReduceScatterCompressed", comm, [&] {
    int o;
    std::memcpy(&o, &op, sizeof(o));
    return issueCompressed(comm, stream, tide::CollType::ReduceScatter, sendbuff, recvbuff,
                           recvcount, datatype, o, compressor);
  });
}

TIDE_API tideResult_t tideAllGatherCompressed(const void* sendbuff, void* recvbuff,
                                              size_t sendcount, tideDataType_t datatype,
                                              tideCompressor_t compressor, tideComm_t comm,
                                              tideStream_t stream) {
  return commCall("tideAllGatherCompressed", comm, [&] {
    return issueCompressed(comm, stream, tide::CollType::AllGather, sendbuff, recvbuff, sendcount,
                           datatype, tideSum, compressor);
  });
}

TIDE_API tideResult_t tideCompressorGetState(tideCompressor_t compressor, void* buf,
                                             size_t* bytes) {
  return guarded("tideCompressorGetState", nullptr, [&]() -> Status {
    TIDE_TRY(checkLive(compressor));
    if (bytes == nullptr) return invalidArgument("bytes is NULL");
    const tide::CodecProvider* prov = tide::codecProvider();
    const size_t need = sizeof(StateHeader) + prov->stateBytes(compressor->state);
    if (buf == nullptr) {
      *bytes = need;
      return Status::Ok();
    }
    if (*bytes < need)
      return invalidArgument("state needs %zu bytes, buffer has %zu", need, *bytes);
    StateHeader h;
    h.codec = compressor->codec;
    h.kind = compressor->fixed ? static_cast<int32_t>(compressor->kind) : -1;
    h.count = compressor->fixed ? compressor->count : 0;
    h.rank = compressor->comm->rank;
    h.nranks = compressor->comm->nranks;
    std::memcpy(buf, &h, sizeof(h));
    if (!prov->saveState(compressor->state, static_cast<char*>(buf) + sizeof(h),
                         need - sizeof(h))) {
      return tide::internalError("saving the compressor state failed");
    }
    *bytes = need;
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCompressorSetState(tideCompressor_t compressor, const void* buf,
                                             size_t bytes) {
  return guarded("tideCompressorSetState", nullptr, [&]() -> Status {
    TIDE_TRY(checkLive(compressor));
    if (buf == nullptr) return invalidArgument("state buffer is NULL");
    StateHeader h;
    if (bytes < sizeof(h)) return invalidArgument("state of %zu bytes is too short", bytes);
    std::memcpy(&h, buf, sizeof(h));
    const StateHeader want;
    if (h.magic != want.magic || h.version != want.version)
      return invalidArgument("not a compressor state (bad magic or version)");
    if (h.codec != compressor->codec)
      return invalidArgument("state of a %s compressor loaded into a %s one",
                             tide::codecName(h.codec), tide::codecName(compressor->codec));
    if (h.nranks != compressor->comm->nranks || h.rank != compressor->comm->rank)
      return invalidArgument("state of rank %d of %d loaded on rank %d of %d", h.rank, h.nranks,
                             compressor->comm->rank, compressor->comm->nranks);
    if (h.kind < -1 || h.kind >= static_cast<int32_t>(tide::CollType::kCount))
      return invalidArgument("corrupt compressor state (collective %d)", h.kind);
    if (!tide::codecProvider()->loadState(
            compressor->state, static_cast<const char*>(buf) + sizeof(h), bytes - sizeof(h))) {
      return invalidArgument("corrupt compressor state (residuals do not add up)");
    }
    compressor->fixed = h.kind >= 0;
    compressor->kind =
        compressor->fixed ? static_cast<tide::CollType>(h.kind) : tide::CollType::AllReduce;
    compressor->count = compressor->fixed ? h.count : 0;
    return Status::Ok();
  });
}

TIDE_API tideResult_t tideCompressorReset(tideCompressor_t compressor) {
  return guarded("tideCompressorReset", nullptr, [&]() -> Status {
    TIDE_TRY(checkLive(compressor));
    tide::codecProvider()->resetState(compressor->state);
    compressor->fixed = false;
    compressor->count = 0;
    return Status::Ok();
  });
}
