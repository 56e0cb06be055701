// The token side of the store: hook tokens (`tokens`), the payloads and
// resume ids resumed to them (`inbox`), and the webhook index (webhook
// token -> tenant, beside the token records). Same rules as store.cpp:
// nothing throws, a read error is storage-error, bad bytes are
// corrupt-record.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <memory>

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"
#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"

namespace durin::persistence {

using namespace store_detail;

namespace {

error read_failure(std::string what, const rocksdb::Status& status) {
  return storage_failure(what, status);
}

std::string subject_of(std::string_view tenant, std::string_view token) {
  return "token '" + std::string(token) + "' of tenant '" +
         std::string(tenant) + "'";
}

bool address_fits(std::string_view tenant, std::string_view token) {
  return keys::fits(tenant) && keys::fits(token);
}

}  // namespace

result<std::optional<token_record>> store::get_token(
    std::string_view tenant, std::string_view token) const {
  using answer = std::optional<token_record>;
  if (!address_fits(tenant, token)) {
    return answer();
  }
  try {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    rocksdb::PinnableSlice value;
    auto read = db_->Get(rocksdb::ReadOptions(), handle(family::tokens),
                         keys::token(tenant, token), &value);
    if (read.IsNotFound()) {
      return answer();
    }
    if (!read.ok()) {
      return read_failure("tokens: read " + subject_of(tenant, token), read);
    }
    auto decoded = codec::decode_token(view(value));
    if (!decoded) {
      return make_error(errc::corrupt_record,
                        "tokens: " + subject_of(tenant, token) + ": " +
                            decoded.error().message);
    }
    return answer(std::move(*decoded));
  } catch (const std::exception& e) {
    return make_error(errc::storage_error,
                      std::string("tokens: read failed: ") + e.what());
  }
}

result<std::vector<payload_record>> store::load_payloads(
    std::string_view tenant, std::string_view token,
    std::uint64_t from_sequence, std::size_t max) const {
  std::vector<payload_record> out;
  if (!address_fits(tenant, token)) {
    return out;
  }
  try {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    auto first = keys::inbox_payload(tenant, token, from_sequence);
    auto end = keys::inbox_prefix(tenant, token);
    end.push_back('\x02');  // payloads (kind 1) sort before resume ids
    rocksdb::Slice upper(end);
    rocksdb::ReadOptions options;
    options.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(options, handle(family::inbox)));
    for (it->Seek(first); it->Valid() && out.size() < max; it->Next()) {
      auto decoded = codec::decode_payload_record(view(it->value()));
      if (!decoded) {
        return make_error(errc::corrupt_record,
                          "inbox: " + subject_of(tenant, token) + ": " +
                              decoded.error().message);
      }
      out.push_back(std::move(*decoded));
    }
    if (!it->status().ok()) {
      return read_failure("inbox: scan " + subject_of(tenant, token),
                          it->status());
    }
    return out;
  } catch (const std::exception& e) {
    return make_error(errc::storage_error,
                      std::string("inbox: scan failed: ") + e.what());
  }
}

result<std::optional<resume_record>> store::get_resume(
    std::string_view tenant, std::string_view token,
    std::string_view resume_id) const {
  using answer = std::optional<resume_record>;
  if (!address_fits(tenant, token) || !keys::fits(resume_id)) {
    return answer();
  }
  try {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    rocksdb::PinnableSlice value;
    auto read = db_->Get(rocksdb::ReadOptions(), handle(family::inbox),
                         keys::inbox_resume(tenant, token, resume_id), &value);
    if (read.IsNotFound()) {
      return answer();
    }
    if (!read.ok()) {
      return read_failure("inbox: read resume id", read);
    }
    auto decoded = codec::decode_resume(view(value));
    if (!decoded) {
      return make_error(errc::corrupt_record,
                        "inbox: resume id of " + subject_of(tenant, token) +
                            ": " + decoded.error().message);
    }
    return answer(std::move(*decoded));
  } catch (const std::exception& e) {
    return make_error(errc::storage_error,
                      std::string("inbox: read failed: ") + e.what());
  }
}

void write_batch::put_token(const token_record& record) {
  if (!address_fits(record.tenant, record.token)) {
    refuse("token address too long for a key");
    return;
  }
  auto put = put_to(family::tokens, keys::token(record.tenant, record.token),
                    codec::encode(record));
  if (!put.ok()) {
    refuse("token: " + put.ToString());
  }
}

void write_batch::delete_token(std::string_view tenant,
                               std::string_view token) {
  if (!address_fits(tenant, token)) {
    refuse("token address too long for a key");
    return;
  }
  auto deleted = delete_from(family::tokens, keys::token(tenant, token));
  if (!deleted.ok()) {
    refuse("token: " + deleted.ToString());
  }
}

void write_batch::put_payload(std::string_view tenant, std::string_view token,
                              const payload_record& record) {
  if (!address_fits(tenant, token)) {
    refuse("token address too long for a key");
    return;
  }
  auto put =
      put_to(family::inbox, keys::inbox_payload(tenant, token, record.sequence),
             codec::encode(record));
  if (!put.ok()) {
    refuse("payload: " + put.ToString());
  }
}

void write_batch::put_resume(std::string_view tenant, std::string_view token,
                             std::string_view resume_id,
                             const resume_record& record) {
  if (!address_fits(tenant, token) || !keys::fits(resume_id)) {
    refuse("resume id or token address too long for a key");
    return;
  }
  auto put = put_to(family::inbox, keys::inbox_resume(tenant, token, resume_id),
                    codec::encode(record));
  if (!put.ok()) {
    refuse("resume id: " + put.ToString());
  }
}

void write_batch::delete_inbox(std::string_view tenant,
                               std::string_view token) {
  if (!address_fits(tenant, token)) {
    refuse("token address too long for a key");
    return;
  }
  auto begin = keys::inbox_prefix(tenant, token);
  auto end = begin;
  end.push_back('\xff');  // past kinds 1 and 2 of this token
  auto deleted = delete_range_from(family::inbox, begin, end);
  if (!deleted.ok()) {
    refuse("inbox: " + deleted.ToString());
  }
}

result<std::optional<std::string>> store::get_webhook_tenant(
    std::string_view token) const {
  using answer = result<std::optional<std::string>>;
  if (!keys::fits(token)) {
    return std::optional<std::string>();
  }
  return guarded("get webhook", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    rocksdb::PinnableSlice value;
    const rocksdb::Status read =
        db_->Get(rocksdb::ReadOptions(), handle(family::tokens),
                 keys::token("", token), &value);
    if (read.IsNotFound()) {
      return std::optional<std::string>();
    }
    if (!read.ok()) {
      return storage_failure("webhook index: read", read);
    }
    auto tenant = codec::decode_bytes(view(value));
    if (!tenant) {
      return corrupt(family::tokens, "webhook " + printable(token),
                     tenant.error().message);
    }
    return std::optional<std::string>(std::move(*tenant));
  });
}

void write_batch::put_webhook_tenant(std::string_view token,
                                     std::string_view tenant) {
  if (!keys::fits(token) || tenant.empty()) {
    refuse("webhook token too long for a key, or no tenant");
    return;
  }
  const auto put = put_to(family::tokens, keys::token("", token),
                          codec::encode_bytes(tenant));
  if (!put.ok()) {
    refuse("webhook index: " + put.ToString());
  }
}

void write_batch::delete_webhook_tenant(std::string_view token) {
  if (!keys::fits(token)) {
    refuse("webhook token too long for a key");
    return;
  }
  const auto deleted = delete_from(family::tokens, keys::token("", token));
  if (!deleted.ok()) {
    refuse("webhook index: " + deleted.ToString());
  }
}
}  // namespace durin::persistence
