#include "daemon/api/tar_format.h"

#include <cstdio>
#include <cstring>

namespace tailor::daemon {
namespace {

// ustar fields: a name of at most 100 bytes (or a prefix of 155 and a name
// of 100, split at a '/'), sizes in 11 octal digits (below 8 GiB).
constexpr std::size_t kName = 100, kPrefix = 155;
constexpr std::uint64_t kMaxOctalSize = 077777777777ull;

void put(char* field, std::size_t width, const std::string& text) {
  std::memcpy(field, text.data(), std::min(width, text.size()));
}

// `value` in `width - 1` octal digits and a NUL, as ustar numbers are.
void put_octal(char* field, std::size_t width, std::uint64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(width - 1), static_cast<unsigned long long>(value));
  std::memcpy(field, buf, width - 1);
  field[width - 1] = '\0';
}

// One ustar header block; `name`/`prefix` already fit their fields.
std::string ustar_block(const std::string& prefix, const std::string& name, std::uint64_t size, std::int64_t mtime,
                        char type) {
  std::string b(kTarBlock, '\0');
  char* h = b.data();
  put(h, kName, name);
  put_octal(h + 100, 8, 0644);  // mode
  put_octal(h + 108, 8, 0);                          // uid
  put_octal(h + 116, 8, 0);                          // gid
  put_octal(h + 124, 12, std::min(size, kMaxOctalSize));
  put_octal(h + 136, 12, static_cast<std::uint64_t>(mtime < 0 ? 0 : mtime));
  h[156] = type;
  std::memcpy(h + 257, "ustar", 6);  // magic with its NUL
  std::memcpy(h + 263, "00", 2);     // version
  put(h + 345, kPrefix, prefix);
  // The checksum: the sum of the header's bytes with the field itself as spaces.
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : b) sum += c;
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  std::memcpy(h + 148, chk, 6);
  h[154] = '\0';
  h[155] = ' ';
  return b;
}

// A pax record: "LEN key=value\n", LEN counting itself.
std::string pax_record(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  std::size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

}  // namespace

std::string tar_padding(std::uint64_t size) {
  const std::uint64_t rest = size % kTarBlock;
  return std::string(rest == 0 ? 0 : kTarBlock - rest, '\0');
}

std::string tar_end() { return std::string(2 * kTarBlock, '\0'); }

std::string tar_file_header(const std::string& path, std::uint64_t size, std::int64_t mtime) {
  std::string prefix, name = path;
  bool fits = name.size() <= kName;
  if (!fits) {
    // Split at a '/' so that the name takes at most 100 bytes and the prefix 155.
    for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
      if (slash <= kPrefix && path.size() - slash - 1 <= kName && slash + 1 < path.size()) {
        prefix = path.substr(0, slash);
        name = path.substr(slash + 1);
        fits = true;
        break;
      }
    }
  }
  std::string out;
  if (!fits || size > kMaxOctalSize) {
    std::string records;
    if (!fits) records += pax_record("path", path);
    if (size > kMaxOctalSize) records += pax_record("size", std::to_string(size));
    out += ustar_block("", "PaxHeader", records.size(), mtime, 'x');
    out += records + tar_padding(records.size());
    if (!fits) {
      prefix.clear();
      name = path.substr(path.size() - std::min(path.size(), kName));  // a readable stand-in for old readers
    }
  }
  out += ustar_block(prefix, name, size, mtime, '0');
  return out;
}

}  // namespace tailor::daemon
