// The registry of the transports' configuration tables. Each transport folder owns its config
// struct and its TOML table ([shm], [udp], [rdma]), declared once as a pollux::ConfigTable (its
// keys, bounds, defaults and help) with an optional check across keys, and adds it here;
// core::Config keeps one value of each table, default-filled from the registry, which
// parse_config() fills and Config::to_toml() prints after the generic tables.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pollux/config.h"

namespace pollux::core {

struct Config;

// What a table's check across keys found: `message` about `key` (the key whose line the error
// names, which may be of another table, e.g. pool.slot_size); an empty key is no issue.
struct ConfigIssue {
  std::string key;
  std::string message;
};

// One table's value, of the table's own type, behind a handle that copies it.
class TableValue {
 public:
  virtual ~TableValue() = default;
  virtual std::unique_ptr<TableValue> clone() const = 0;
  virtual void* get() noexcept = 0;
};

template <class T>
class TableValueOf final : public TableValue {
 public:
  std::unique_ptr<TableValue> clone() const override { return std::make_unique<TableValueOf>(*this); }
  void* get() noexcept override { return &value_; }

 private:
  T value_{};
};

// The slot of core::Config that holds the table of type T: set when T's table is registered.
template <class T>
struct TableSlot {
  static inline std::size_t index = static_cast<std::size_t>(-1);
};

struct RegisteredTable {
  const ConfigKeys* keys = nullptr;  // the table's name (keys->table()) and its keys, in print order
  std::unique_ptr<TableValue> (*make_default)() = nullptr;
  std::function<ConfigIssue(const Config&)> validate;  // null: no check across keys
};

class ConfigRegistry {
 public:
  // `keys` must outlive the registry (a table of static storage duration).
  template <class T>
  void add(const ConfigTable<T>& keys, std::function<ConfigIssue(const Config&)> validate = nullptr) {
    TableSlot<T>::index = tables_.size();
    tables_.push_back(
        RegisteredTable{&keys, []() -> std::unique_ptr<TableValue> { return std::make_unique<TableValueOf<T>>(); },
                        std::move(validate)});
  }
  const std::vector<RegisteredTable>& tables() const noexcept { return tables_; }

 private:
  std::vector<RegisteredTable> tables_;
};

// Every registered table, in registration order (to_toml() prints them in it). The first call
// registers them all (register_transport_tables()).
const ConfigRegistry& config_registry();

// Adds every transport's table to `r`. Defined by the transport registry (transport/factory.cc);
// core calls it once, from config_registry(), so a program that links core without the
// transports fails to link instead of parsing configurations without their tables.
void register_transport_tables(ConfigRegistry& r);

// The values of the registered tables, one slot each, default-filled; copies copy them.
class TableValues {
 public:
  TableValues();
  TableValues(const TableValues& o);
  TableValues& operator=(const TableValues& o);
  TableValues(TableValues&&) noexcept = default;
  TableValues& operator=(TableValues&&) noexcept = default;
  ~TableValues() = default;

  void* get(std::size_t slot) const noexcept { return values_[slot]->get(); }

 private:
  std::vector<std::unique_ptr<TableValue>> values_;
};

}  // namespace pollux::core
