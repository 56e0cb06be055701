// The whole public API of durin.
#pragma once

#include "durin/clock.hpp"
#include "durin/error.hpp"
#include "durin/flow.hpp"
#include "durin/json.hpp"
#include "durin/limits.hpp"
#include "durin/registry.hpp"
#include "durin/run.hpp"
#include "durin/runtime.hpp"
#include "durin/step.hpp"
