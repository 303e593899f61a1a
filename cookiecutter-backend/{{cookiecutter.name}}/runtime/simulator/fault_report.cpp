// The report of a host access to discrete device memory (simulator.h). Device
// addresses are PROT_NONE, so such an access raises SIGSEGV; instead of a bare
// "Segmentation fault" the handler says, on stderr, which op was running (the
// generated wrapper names it: runtime::current_op()), its kernel, whether the
// access came from the kernel's host part or from queued device work, the
// address, and the allocation it falls in. Then the process dies as before:
// the handler puts back the previous one (Python's faulthandler prints the
// Python stack; by default the signal kills the process) and returns, so the
// access faults again. A crash of queued work elsewhere (a body that captured
// by reference) is named with the op that queued it; other faults go straight
// to the previous handler.
//
// A signal handler may not allocate or block: the text is built in a fixed
// buffer and written with write(2); the allocation is looked up only if the
// allocator's lock is free.
#include "simulator.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace {{ cookiecutter.name }}::sim {
namespace {

struct sigaction g_previous;
bool g_installed = false;

class Text {
 public:
  Text& add(const char* s) {
    while (s && *s && n_ < sizeof buf_ - 1) buf_[n_++] = *s++;
    return *this;
  }
  Text& hex(std::uintptr_t v) {
    char digits[2 * sizeof v];
    int k = 0;
    do {
      digits[k++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    add("0x");
    while (k) put(digits[--k]);
    return *this;
  }
  Text& dec(std::uint64_t v) {
    char digits[20];
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v);
    while (k) put(digits[--k]);
    return *this;
  }
  void write_to_stderr() const {
    std::size_t done = 0;
    while (done < n_) {
      const ssize_t w = ::write(STDERR_FILENO, buf_ + done, n_ - done);
      if (w <= 0) return;
      done += static_cast<std::size_t>(w);
    }
  }

 private:
  void put(char c) {
    if (n_ < sizeof buf_ - 1) buf_[n_++] = c;
  }
  char buf_[2048];
  std::size_t n_ = 0;
};

void add_op(Text& t, const runtime::OpInfo* op) {
  t.add(op->op);
  if (op->kernel && *op->kernel) t.add(" (kernel ").add(op->kernel).add(")");
}

void report(const void* addr, const FaultSite& site) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  Text t;
  t.add("\n{{ cookiecutter.name }}: host code accessed device memory at ").hex(a);
  t.add(" ({{ cookiecutter.name }}:").dec(static_cast<std::uint64_t>(site.device)).add(", ");
  if (site.base)
    t.dec(a - site.base).add(" bytes into the allocation of ").dec(site.size).add(" bytes at ")
        .hex(site.base).add(")");
  else if (site.allocations_known)
    t.add("in no live allocation: freed, or never allocated)");
  else
    t.add("its allocation unknown: the allocator was busy)");
  if (const RunningWork* work = running_work()) {
    t.add("\n  in device work: a ").add(work->what).add(" queued");
    if (work->queued_by) {
      t.add(" by ");
      add_op(t, work->queued_by);
    }
    t.add(" on ");
    if (work->stream_id)
      t.add("stream #").dec(work->stream_id);
    else
      t.add("the default stream");
    t.add(" of device ").dec(static_cast<std::uint64_t>(work->device));
    t.add(".\n  Launched work reaches device memory only through the device's view of an "
          "address: DeviceTensor::data_ptr<T>() inside launch() (generated/kernel_lib/device.h), not the address itself.\n");
  } else if (const runtime::OpInfo* op = runtime::current_op()) {
    t.add("\n  while running ");
    add_op(t, op);
    t.add(", in its host part (the calling thread).\n  Device memory is not host-addressable "
          "(device.yaml memory.model: discrete): a kernel's host part never dereferences "
          "data_ptr(); it captures the address by value and its launched device part reads it "
          "through runtime::device_ptr (docs/writing-a-kernel.md, \"Reading and writing "
          "memory\").\n");
  } else {
    t.add("\n  in host code outside any op of this backend (Python, ctypes, or other native "
          "code): device memory is not host-addressable (device.yaml memory.model: discrete); "
          "copy it to the host (tensor.cpu()) first.\n");
  }
  t.write_to_stderr();
}

// A crash inside queued work at an address that is not device memory: most often a
// launched body that captured by reference and reads the kernel's stack after the
// kernel returned (or a null view: device_ptr of something that is not device memory).
void report_work_crash(const void* addr, const RunningWork& work) {
  Text t;
  t.add("\n{{ cookiecutter.name }}: device work crashed at ").hex(reinterpret_cast<std::uintptr_t>(addr));
  t.add(" (not device memory): a ").add(work.what).add(" queued");
  if (work.queued_by) {
    t.add(" by ");
    add_op(t, work.queued_by);
  }
  t.add(" on ");
  if (work.stream_id)
    t.add("stream #").dec(work.stream_id);
  else
    t.add("the default stream");
  t.add(" of device ").dec(static_cast<std::uint64_t>(work.device));
  t.add(".\n  Queued work runs after its kernel returned: a launched body that captures by "
        "reference ([&]) reads the kernel's stack when it is gone. Capture by value ([=], or "
        "[x, y, n]); docs/writing-a-kernel.md, \"Reading and writing memory\".\n");
  t.write_to_stderr();
}

void on_fault(int sig, siginfo_t* info, void*) {
  FaultSite site;
  if (locate_fault(info->si_addr, &site))
    report(info->si_addr, site);
  else if (const RunningWork* work = running_work())
    report_work_crash(info->si_addr, *work);
  // The previous handler takes the repeated fault (and any fault not ours).
  sigaction(sig, &g_previous, nullptr);
}

}  // namespace

void install_fault_report() {
  if (g_installed) return;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = &on_fault;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSEGV, &action, &g_previous) == 0) g_installed = true;
}

}  // namespace {{ cookiecutter.name }}::sim
