// The JSON value every layer uses (metrics, scenario trees, baselines): nlohmann's ordered
// json, so keys keep the order they were written in. Its own small header, so that reading a
// scenario (config/) does not reach up into the recorder for it.
#pragma once
#include <nlohmann/json.hpp>

namespace sluice {

using Json = nlohmann::ordered_json;

}  // namespace sluice
