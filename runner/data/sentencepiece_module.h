// The C interface of libtailor_sentencepiece.so, the one place that links
// Debian's libsentencepiece. That library bundles protobuf-lite 3.14 and
// exports its symbols, which clash with LibTorch's libprotobuf 3.21 in one
// symbol scope (measured: a crash in libprotobuf's static initialisers, or
// sentencepiece's version check failing, depending on load order). So the
// runner loads this module with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): each
// library then binds to its own protobuf. Internal to runner/data.
#pragma once

#include <cstddef>

extern "C" {

// Receives the result of encode (ids) or decode (bytes); called once.
typedef void (*TailorSpIdSink)(void* ctx, const int* ids, std::size_t count);
typedef void (*TailorSpTextSink)(void* ctx, const char* text, std::size_t size);

struct TailorSpApi {
  int abi_version;  // kTailorSpAbiVersion
  // A processor loaded from a serialized ModelProto, or null with a message
  // in error (NUL-terminated, cut to error_size).
  void* (*load)(const char* model, std::size_t size, char* error, std::size_t error_size);
  void (*destroy)(void* sp);
  int (*piece_size)(const void* sp);
  int (*bos_id)(const void* sp);
  int (*eos_id)(const void* sp);
  int (*pad_id)(const void* sp);
  int (*is_control)(const void* sp, int id);
  // 0 on success (sink called), non-zero on failure.
  int (*encode)(const void* sp, const char* text, std::size_t size, TailorSpIdSink sink, void* ctx);
  int (*decode)(const void* sp, const int* ids, std::size_t count, TailorSpTextSink sink, void* ctx);
};

// The module's one exported symbol.
const TailorSpApi* tailor_sentencepiece_api(void);

}  // extern "C"

inline constexpr int kTailorSpAbiVersion = 1;
