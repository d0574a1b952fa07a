"""The fetch's progress as Prometheus text on --metrics-port, one series per source: the operator
reads it into the job's status while the preflight pod's fetch container runs. The names are
common/metrics/fetch_series.h's."""
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_STATE = {}  # source -> {"bytes", "totalBytes", "bytesPerSecond", "etaSeconds"}
_LOCK = threading.Lock()
_SERIES = (("kubetune_fetch_bytes", "bytes", "Bytes of the source on disk so far."),
           ("kubetune_fetch_total_bytes", "totalBytes", "Bytes of the source in all."),
           ("kubetune_fetch_bytes_per_second", "bytesPerSecond", "Download rate of this run."),
           ("kubetune_fetch_eta_seconds", "etaSeconds", "Seconds left at that rate."))


def update(source: str, state: dict) -> None:
    with _LOCK:
        _STATE[source] = dict(state)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render() -> str:
    with _LOCK:
        state = dict(_STATE)
    lines = []
    for name, key, help_text in _SERIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for source, values in sorted(state.items()):
            if values.get(key) is not None:
                lines.append(f'{name}{{source="{_label(source)}"}} {values[key]}')
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        body = render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # scrapes are not worth a log line
        pass


class _DualStackServer(ThreadingHTTPServer):
    address_family = socket.AF_INET6  # "::" also answers IPv4 where the kernel allows it


def serve(port: int):
    """Serves /metrics on every address of the pod (IPv6 and IPv4); None when it cannot (the
    fetch goes on without: progress is a convenience, the download is the job)."""
    for server_class, host in ((_DualStackServer, "::"), (ThreadingHTTPServer, "0.0.0.0")):
        try:
            server = server_class((host, port), _Handler)
        except OSError:
            continue
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server
    return None
