// The store's SQLite layer is platform/sqlite.h (shared with the
// calibration store that `tailor` opens too); its names in daemon code.
#pragma once

#include "platform/sqlite.h"

namespace tailor::daemon {

using platform::Database;
using platform::Statement;
using platform::Transaction;

}  // namespace tailor::daemon
