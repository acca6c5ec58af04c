// libtailor_sentencepiece.so: sentencepiece_module.h's functions over
// sentencepiece::SentencePieceProcessor. No exception leaves it.
#include "runner/data/sentencepiece_module.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor& as_processor(const void* sp) { return *static_cast<const Processor*>(sp); }

void copy_error(const std::string& message, char* error, std::size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const std::size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

void* load(const char* model, std::size_t size, char* error, std::size_t error_size) {
  try {
    auto sp = std::make_unique<Processor>();
    const auto status = sp->LoadFromSerializedProto(std::string_view(model, size));
    if (!status.ok()) {
      copy_error(status.ToString(), error, error_size);
      return nullptr;
    }
    return sp.release();
  } catch (const std::exception& e) {  // protobuf throws on fatal checks, std::bad_alloc on absurd sizes
    copy_error(e.what(), error, error_size);
  } catch (...) {
    copy_error("unknown exception", error, error_size);
  }
  return nullptr;
}

void destroy(void* sp) { delete static_cast<Processor*>(sp); }
int piece_size(const void* sp) { return as_processor(sp).GetPieceSize(); }
int bos_id(const void* sp) { return as_processor(sp).bos_id(); }
int eos_id(const void* sp) { return as_processor(sp).eos_id(); }
int pad_id(const void* sp) { return as_processor(sp).pad_id(); }
int is_control(const void* sp, int id) { return as_processor(sp).IsControl(id) ? 1 : 0; }

int encode(const void* sp, const char* text, std::size_t size, TailorSpIdSink sink, void* ctx) {
  try {
    std::vector<int> ids;
    if (!as_processor(sp).Encode(std::string_view(text, size), &ids).ok()) return 1;
    sink(ctx, ids.data(), ids.size());
    return 0;
  } catch (...) {
    return 1;
  }
}

int decode(const void* sp, const int* ids, std::size_t count, TailorSpTextSink sink, void* ctx) {
  try {
    std::string text;
    if (!as_processor(sp).Decode(std::vector<int>(ids, ids + count), &text).ok()) return 1;
    sink(ctx, text.data(), text.size());
    return 0;
  } catch (...) {
    return 1;
  }
}

constexpr TailorSpApi kApi = {kTailorSpAbiVersion, load,   destroy, piece_size, bos_id,
                              eos_id,              pad_id, is_control, encode,  decode};

}  // namespace

extern "C" __attribute__((visibility("default"))) const TailorSpApi* tailor_sentencepiece_api(void) {
  return &kApi;
}
