#pragma once

#include <string>

namespace kubetune::metrics {

// A currently free TCP port on `address`, taken below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range) when one is free there: the kernel never hands those out as
// the source port of an outgoing connection or to another bind(0), so the port stays free
// until the caller binds it unless someone asks for that very number. Falls back to a port
// from bind(0). Callers still retry on a bind failure.
// Throws std::runtime_error when `address` cannot be resolved or bound.
int pick_free_port(const std::string& address);

}  // namespace kubetune::metrics
