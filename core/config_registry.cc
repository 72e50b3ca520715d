#include "core/config_registry.h"

namespace pollux::core {

const ConfigRegistry& config_registry() {
  static const ConfigRegistry registry = [] {
    ConfigRegistry r;
    register_transport_tables(r);
    return r;
  }();
  return registry;
}

TableValues::TableValues() {
  for (const RegisteredTable& t : config_registry().tables()) values_.push_back(t.make_default());
}

TableValues::TableValues(const TableValues& o) {
  values_.reserve(o.values_.size());
  for (const auto& v : o.values_) values_.push_back(v->clone());
}

TableValues& TableValues::operator=(const TableValues& o) {
  if (this != &o) *this = TableValues(o);
  return *this;
}

}  // namespace pollux::core
