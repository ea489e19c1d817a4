// ConfigError: a user's file is wrong. what() is one line naming the file and the field.
#pragma once

#include <stdexcept>
#include <string>

namespace ravnest::base {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ravnest::base
