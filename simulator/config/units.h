// Quantities with units, parsed only here at the config boundary. Inside the simulator a
// quantity is a plain number whose unit is in its name (bytes, bandwidth_Bps, flops).
#pragma once
#include <optional>
#include <string>
#include <utility>

#include "engine/simtime.h"

namespace sluice {

enum class UnitKind {
  Time,       // "2us", "1.5ms", "2000h"           -> SimTime
  Bytes,      // "80GiB", "12.8GB", "4096B"         -> bytes
  Bandwidth,  // "400GB/s", "25Gb/s"                -> bytes per second
  FlopRate,   // "275TFLOP/s"                       -> FLOP per second
  Rate,       // "20/s", "300/min"                  -> events per second
  Money,      // "$25000", "25000USD", bare number  -> US dollars
  Power,      // "700W", "1.2kW", "20MW"            -> watts
};

// The units accepted for a kind, for error messages and docs.
std::string valid_units(UnitKind k);
const char* unit_kind_name(UnitKind k);
// The magnitudes accepted for a kind, in base units (ns, B, B/s, FLOP/s, /s, USD, W); zero is
// always accepted (ranges of a parameter say whether it may be zero).
std::pair<double, double> plausible_range(UnitKind k);
const char* base_unit(UnitKind k);

// Parses "<number><unit>" into base units (seconds are returned as nanoseconds for Time).
// Returns nullopt and fills `why` when the text is not a valid quantity of that kind.
std::optional<double> parse_quantity(const std::string& text, UnitKind kind, std::string* why = nullptr);
std::optional<SimTime> parse_time(const std::string& text, std::string* why = nullptr);

// Plain numbers, strictly: the whole text must be the number.
std::optional<double> parse_real(const std::string& text);
std::optional<long long> parse_int(const std::string& text);

// Formatting helpers for human output.
std::string format_bytes(double bytes);
std::string format_bandwidth(double Bps);

}  // namespace sluice
