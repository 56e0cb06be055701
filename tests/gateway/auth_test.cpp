// API keys on a real store: verified keys are cached in memory, and the
// cache never lets a revoked key through once revoke_key has returned, even
// while other threads authenticate with that key the whole time.
//
// Method: a real RocksDB in a temp dir, the real committer; threads hammer
// authenticate while the main thread revokes, then every later call must
// be refused.
#include "gateway/auth.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/support/store_fixture.hpp"

namespace durin::gateway {
namespace {

class AuthTest : public testing::store_fixture {
 protected:
  void SetUp() override {
    store_fixture::SetUp();
    if (HasFatalFailure()) {
      return;  // the store did not open
    }
    key_store_ = std::make_unique<persistence::auth_store>(*store_, *writer_);
    keys_ = std::make_unique<auth>(*key_store_, [] { return 1'000'000; });
    auto made = keys_->bootstrap(dir_.path() + "/admin.key");
    ASSERT_TRUE(made.ok());
  }

  static std::string bearer(const new_api_key& key) {
    return "Bearer " + key.secret;
  }

  std::unique_ptr<persistence::auth_store> key_store_;
  std::unique_ptr<auth> keys_;
};

TEST_F(AuthTest, CachedKeyStillNeedsItsSecret) {
  auto key = keys_->create_key("default", "k");
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(keys_->authenticate(bearer(*key)).ok());  // now cached
  auto forged = key->secret;
  forged.back() = forged.back() == '0' ? '1' : '0';
  auto refused = keys_->authenticate("Bearer " + forged);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  auto again = keys_->authenticate(bearer(*key));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->key_id, key->record.id);
  EXPECT_EQ(again->tenant, "default");
}

// The scheme's name is case-insensitive (RFC 9110 11.1); anything else in
// its place is refused.
TEST_F(AuthTest, TheBearerSchemeIsMatchedWithoutRegardToCase) {
  auto key = keys_->create_key("default", "k");
  ASSERT_TRUE(key.ok());
  for (const char* scheme : {"Bearer ", "bearer ", "BEARER "}) {
    auto found = keys_->authenticate(scheme + key->secret);
    ASSERT_TRUE(found.ok()) << scheme << found.error().message;
    EXPECT_EQ(found->key_id, key->record.id);
  }
  for (const char* scheme : {"Basic ", "Bearer", "Bearerx "}) {
    auto refused = keys_->authenticate(scheme + key->secret);
    EXPECT_FALSE(refused.ok()) << scheme;
  }
}

TEST_F(AuthTest, RevokedKeyIsRefusedAtOnceThoughKeysAreCached) {
  auto key = keys_->create_key("default", "k");
  auto other = keys_->create_key("default", "other");
  ASSERT_TRUE(key.ok() && other.ok());
  ASSERT_TRUE(keys_->authenticate(bearer(*key)).ok());
  ASSERT_TRUE(keys_->authenticate(bearer(*other)).ok());
  auto revoked =
      keys_->revoke_key("default", key->record.id, key_role::operate);
  ASSERT_TRUE(revoked.ok());
  EXPECT_EQ(*revoked, revoke_refusal::none);
  auto refused = keys_->authenticate(bearer(*key));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_TRUE(keys_->authenticate(bearer(*other)).ok());
}

// Reads that race with the revocation (a store read of the key just before
// its erase) must not leave it in the cache.
TEST_F(AuthTest, RevocationRacingWithAuthenticationLeavesNoStaleEntry) {
  for (int round = 0; round < 20; ++round) {
    auto key = keys_->create_key("default", "k" + std::to_string(round));
    ASSERT_TRUE(key.ok());
    std::atomic<bool> stop{false};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t) {
      readers.emplace_back([&] {
        while (!stop.load()) {
          (void)keys_->authenticate(bearer(*key));
        }
      });
    }
    auto revoked =
        keys_->revoke_key("default", key->record.id, key_role::operate);
    ASSERT_TRUE(revoked.ok());
    // From here on, whatever the readers still do, the key is refused.
    for (int check = 0; check < 200; ++check) {
      ASSERT_FALSE(keys_->authenticate(bearer(*key)).ok())
          << "round " << round << " check " << check;
    }
    stop = true;
    for (auto& reader : readers) {
      reader.join();
    }
    EXPECT_FALSE(keys_->authenticate(bearer(*key)).ok()) << "round " << round;
  }
}

// A key revokes only keys of its own role or lower: an operator key cannot
// take the admin key away (it stays, and keeps working).
TEST_F(AuthTest, AKeyRevokesOnlyKeysOfItsRoleOrLower) {
  auto admin = keys_->create_key("default", "a", key_role::admin);
  auto second_admin = keys_->create_key("default", "a2", key_role::admin);
  auto operate = keys_->create_key("default", "o", key_role::operate);
  auto reader = keys_->create_key("default", "r", key_role::read_only);
  ASSERT_TRUE(admin.ok() && second_admin.ok() && operate.ok() && reader.ok());
  auto refused =
      keys_->revoke_key("default", admin->record.id, key_role::operate);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(*refused, revoke_refusal::higher_role);
  auto still = keys_->authenticate(bearer(*admin));
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->role, key_role::admin);
  auto lower =
      keys_->revoke_key("default", reader->record.id, key_role::operate);
  ASSERT_TRUE(lower.ok());
  EXPECT_EQ(*lower, revoke_refusal::none);
  auto by_admin =
      keys_->revoke_key("default", second_admin->record.id, key_role::admin);
  ASSERT_TRUE(by_admin.ok());
  EXPECT_EQ(*by_admin, revoke_refusal::none);
}

// The last admin key of a tenant cannot be revoked, by anyone: nobody could
// create tenants or admin keys again.
TEST_F(AuthTest, TheLastAdminKeyCannotBeRevoked) {
  auto only = keys_->create_key("other-tenant", "a", key_role::admin);
  ASSERT_TRUE(only.ok());
  auto refused =
      keys_->revoke_key("other-tenant", only->record.id, key_role::admin);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(*refused, revoke_refusal::last_admin_key);
  EXPECT_TRUE(keys_->authenticate(bearer(*only)).ok());
}

// A key's role survives the store: what authenticate answers is what was
// written.
TEST_F(AuthTest, AKeysRoleIsStoredWithIt) {
  for (auto role : {key_role::read_only, key_role::worker, key_role::operate,
                    key_role::admin}) {
    auto key = keys_->create_key("default", "k", role);
    ASSERT_TRUE(key.ok());
    auto caller = keys_->authenticate(bearer(*key));
    ASSERT_TRUE(caller.ok());
    EXPECT_EQ(caller->role, role) << to_string(role);
  }
}

// What another node sends is merged so that the order never matters: a
// revocation wins over the live key whichever arrives first, a repeat
// changes nothing, and a key revoked elsewhere leaves no cached entry here.
TEST_F(AuthTest, AMergedRevocationWinsInEitherOrderAndEmptiesTheCache) {
  auto key = keys_->create_key("default", "k");
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(keys_->authenticate(bearer(*key)).ok());  // cached
  auto revoked = key->record;
  revoked.revoked_at_ms = 2'000'000;
  auto merged = keys_->merge({{}, {revoked}});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(*merged, 1u);
  EXPECT_FALSE(keys_->authenticate(bearer(*key)).ok());
  // The live record arriving late, or the revocation again: nothing.
  auto late = keys_->merge({{}, {key->record, revoked}});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(*late, 0u);
  EXPECT_FALSE(keys_->authenticate(bearer(*key)).ok());
  // Revocation first, on a node that never saw the key live.
  auto elsewhere = keys_->create_key("default", "elsewhere");
  ASSERT_TRUE(elsewhere.ok());
  auto gone = elsewhere->record;
  gone.id = "key_00000000000000ff";
  gone.revoked_at_ms = 2'000'000;
  auto live = gone;
  live.revoked_at_ms = 0;
  ASSERT_TRUE(keys_->merge({{}, {gone}}).ok());
  ASSERT_TRUE(keys_->merge({{}, {live}}).ok());
  auto stored = keys_->key_record(gone.id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_TRUE((*stored)->revoked());
  auto listed = keys_->list_keys("default");
  ASSERT_TRUE(listed.ok());
  for (const auto& one : *listed) {
    EXPECT_NE(one.id, gone.id);
    EXPECT_NE(one.id, key->record.id);
  }
}

// A merge adds what the node lacks (a tenant with its first key) and keeps
// what it holds; the table it answers holds revoked keys too.
TEST_F(AuthTest, AMergeAddsWhatIsMissingAndTheTableKeepsRevokedKeys) {
  persistence::tenant_record tenant{"tenant_abc", "acme", 5};
  auto first = keys_->create_key("default", "template");
  ASSERT_TRUE(first.ok());
  auto record = first->record;
  record.id = "key_00000000000000aa";
  record.tenant = tenant.id;
  auto merged = keys_->merge({{tenant}, {record}});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(*merged, 2u);
  auto listed = keys_->list_keys(tenant.id);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().id, record.id);
  ASSERT_EQ(keys_->revoke_key(tenant.id, record.id, key_role::admin).value(),
            revoke_refusal::none);
  // Revoking it again is the same revocation.
  EXPECT_EQ(keys_->revoke_key(tenant.id, record.id, key_role::admin).value(),
            revoke_refusal::none);
  auto table = keys_->table();
  ASSERT_TRUE(table.ok());
  bool kept = false;
  for (const auto& key : table->keys) {
    kept = kept || (key.id == record.id && key.revoked());
  }
  EXPECT_TRUE(kept);
  EXPECT_EQ(table->tenants.size(), 2u);  // default and acme
}

}  // namespace
}  // namespace durin::gateway
