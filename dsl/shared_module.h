// Tailor's modules opened at run time: libtailor_tables.so (Parquet and
// Arrow, dsl/table_module.h) and libtailor_sentencepiece.so
// (runner/data/sentencepiece_module.h). Each is a shared object of its own
// so that the libraries it bundles (Arrow, protobuf) never share a symbol
// scope with the program's (LibTorch's), and a program that never reads
// such data never loads them.
#pragma once

#include <string_view>

#include "core/status.h"

namespace tailor::dsl {

// The entry of module `file`, as `entry` makes it from the module's symbol
// `symbol` (calling it through its own type, and checking its ABI
// version: null when the module is not this build's). The module is looked
// for in lib/ beside the running program's folder (bin/../lib, where the
// build and the install put it), then at `built_at` (where this build wrote
// it; empty: nowhere else); the first that gives an entry is kept, opened
// with RTLD_LOCAL | RTLD_DEEPBIND (it binds to its own bundled libraries
// before same-named symbols of the program's, and adds none to the
// program) and never closed; one passed over is closed again. Otherwise
// FailedPrecondition whose message lists each candidate and why it was
// passed over (" PATH (missing)", " PATH (dlerror's words)", " PATH (not
// this build's module)"), empty when there was none: the caller says what
// needed the module.
Result<const void*> open_shared_module(std::string_view file, std::string_view built_at, const char* symbol,
                                       const void* (*entry)(void* symbol));

}  // namespace tailor::dsl
