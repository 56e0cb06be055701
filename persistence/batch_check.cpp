#include "persistence/batch_check.hpp"

#include <rocksdb/write_batch.h>

#include <algorithm>
#include <string>

namespace durin::persistence {

namespace {

// check_families' handler: copies nothing, stops at the first record
// that is not an operation durin writes on a known family. A merge is
// refused here (the Handler's default takes one in the default family);
// anything else (blob index, entities, 2PC markers) its defaults refuse.
class family_check final : public rocksdb::WriteBatch::Handler {
 public:
  explicit family_check(const std::vector<std::uint32_t>& known)
      : known_(known) {}

  rocksdb::Status PutCF(std::uint32_t id, const rocksdb::Slice&,
                        const rocksdb::Slice&) override {
    return check(id);
  }
  rocksdb::Status DeleteCF(std::uint32_t id, const rocksdb::Slice&) override {
    return check(id);
  }
  rocksdb::Status SingleDeleteCF(std::uint32_t id,
                                 const rocksdb::Slice&) override {
    return check(id);
  }
  rocksdb::Status DeleteRangeCF(std::uint32_t id, const rocksdb::Slice&,
                                const rocksdb::Slice&) override {
    return id == 0 ? unknown(id) : check(id);
  }
  rocksdb::Status MergeCF(std::uint32_t, const rocksdb::Slice&,
                          const rocksdb::Slice&) override {
    return rocksdb::Status::InvalidArgument("a merge is never written");
  }

 private:
  rocksdb::Status check(std::uint32_t id) const {
    if (id == 0 ||
        std::find(known_.begin(), known_.end(), id) != known_.end()) {
      return rocksdb::Status::OK();
    }
    return unknown(id);
  }
  static rocksdb::Status unknown(std::uint32_t id) {
    return rocksdb::Status::InvalidArgument("operation on column family " +
                                            std::to_string(id) + " refused");
  }
  const std::vector<std::uint32_t>& known_;
};

}  // namespace

status check_families(const rocksdb::WriteBatch& batch,
                      const std::vector<std::uint32_t>& known) {
  family_check check(known);
  if (const auto checked = batch.Iterate(&check); !checked.ok()) {
    return make_error(errc::invalid_argument, checked.ToString());
  }
  return {};
}

}  // namespace durin::persistence
