// The auth store's whole-table reads (list_tenants, list_all_api_keys), on
// a real store: what a node sends another when their key tables merge must
// be every record or an error, never a table that silently leaves some out.
#include "persistence/auth_store.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "persistence/committer.hpp"
#include "persistence/keys.hpp"
#include "tests/persistence/test_support.hpp"

namespace durin::persistence {
namespace {

class AuthStoreTest : public testing::reopenable_store {
 protected:
  void SetUp() override {
    reopenable_store::SetUp();
    writer_ = std::make_unique<committer>(*store_);
    auth_ = std::make_unique<auth_store>(*store_, *writer_);
  }

  void TearDown() override {
    auth_.reset();
    writer_.reset();
  }

  // A tenant and its first key; the key revoked when `revoked`.
  void add_tenant(const std::string& id, bool revoked = false) {
    api_key_record key{"key_" + id,    id, "first", "00", 1, key_role::admin,
                       revoked ? 2 : 0};
    ASSERT_TRUE(auth_->create_tenant({id, "Tenant " + id, 1}, key).ok());
  }

  std::unique_ptr<committer> writer_;
  std::unique_ptr<auth_store> auth_;
};

TEST_F(AuthStoreTest, EveryTenantAndEveryKeyRevokedOnesIncludedIsRead) {
  add_tenant("t-b");
  add_tenant("t-a", /*revoked=*/true);
  add_tenant("t-c");

  auto tenants = auth_->list_tenants(3);
  ASSERT_TRUE(tenants.ok()) << tenants.error().message;
  std::vector<std::string> ids;
  for (const auto& tenant : *tenants) {
    ids.push_back(tenant.id);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"t-a", "t-b", "t-c"}));

  auto keys = auth_->list_all_api_keys(3);
  ASSERT_TRUE(keys.ok()) << keys.error().message;
  std::vector<std::string> key_ids;
  for (const auto& key : *keys) {
    key_ids.push_back(key.id);
  }
  EXPECT_EQ(key_ids,
            (std::vector<std::string>{"key_t-a", "key_t-b", "key_t-c"}));
  EXPECT_TRUE((*keys)[0].revoked());
  EXPECT_FALSE((*keys)[1].revoked());
  // The live-key listing of a tenant leaves the revoked key out.
  auto live = auth_->list_api_keys("t-a", 10);
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
}

TEST_F(AuthStoreTest, MoreRecordsThanTheCapFailTheReadInsteadOfCuttingIt) {
  add_tenant("t-a");
  add_tenant("t-b");
  add_tenant("t-c");

  auto tenants = auth_->list_tenants(2);
  ASSERT_FALSE(tenants.ok());
  EXPECT_EQ(tenants.error().code, errc::invalid_argument);
  EXPECT_EQ(tenants.error().message, "more than 2 tenants");

  auto keys = auth_->list_all_api_keys(2);
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.error().code, errc::invalid_argument);
  EXPECT_EQ(keys.error().message,
            "more than 2 API keys (revoked ones included)");

  // A bounded listing of ids is a page, not a table: it stops at the cap.
  auto some = auth_->list_tenant_ids(2);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->size(), 2u);
}

TEST_F(AuthStoreTest, ARecordThatDoesNotDecodeFailsTheWholeTableRead) {
  add_tenant("t-a");
  auto batch = store_->batch();
  batch.put_value(family::tenants, keys::tenant("t-broken"), "not a record");
  ASSERT_TRUE(store_->write(batch).ok());

  auto tenants = auth_->list_tenants(10);
  ASSERT_FALSE(tenants.ok());
  EXPECT_EQ(tenants.error().code, errc::corrupt_record);
  // The page of ids skips what it cannot read.
  auto ids = auth_->list_tenant_ids(10);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"t-a"}));
}

}  // namespace
}  // namespace durin::persistence
