#pragma once

// Everything a component needs to export or read kubetune metrics.
#include "common/metrics/exposer.h"
#include "common/metrics/registry.h"
#include "common/metrics/scrape.h"
#include "common/metrics/series_spec.h"
