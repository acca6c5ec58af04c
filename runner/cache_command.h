// `tailor-data cache show|prune|clear` (`tailor cache` runs it): the cache
// folder's entries (io/cache_folder.h) listed, pruned least recently used
// first, or cleared. Torch-free.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tailor::runner {

// `args` after "cache". Exit codes: 0 done, 1 the folder or a file could
// not be read or removed, 2 bad command line.
int run_cache_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tailor::runner
