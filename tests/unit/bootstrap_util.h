// Helpers shared by the bootstrap unit tests.
#pragma once

#include <gtest/gtest.h>

#include "core/auth.h"
#include "core/socket.h"
#include "core/unique_id.h"

namespace tide {

// Starts a bootstrap root on a free loopback port with a fresh secret.
inline UniqueIdData startRoot(bool authenticated) {
  UniqueIdData id;
  EXPECT_TRUE(resolveAddress("127.0.0.1", 0, &id.root).ok());
  EXPECT_TRUE(randomBytes(id.secret, sizeof(id.secret)).ok());
  id.authenticated = authenticated;
  EXPECT_TRUE(startBootstrapRoot(&id).ok());
  return id;
}

}  // namespace tide
