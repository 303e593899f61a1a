// Which vector instruction set acme's kernels use: the simulated chip's vector
// units. By default the best the host CPU supports (AVX-512, else AVX2 + FMA,
// else none: scalar loops); ACME_ISA or the runtime option "isa" can force a
// lower one on any machine, so every path is tested wherever tests run
// (tests/conftest.py `each_isa`). A level the CPU lacks is refused, naming the
// CPU's best: running AVX-512 code on an AVX2 CPU would die of SIGILL.
//
// Kernels read it at every call (one relaxed atomic load), so a change applies
// to the next kernel. Not to be changed while kernels run.
//
// No torch includes: this is part of the vendor runtime.
#pragma once

#include <string>

namespace acme::isa {

enum Level : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU supports.
Level hardware();
// The level kernels use now.
Level active();

// "auto" (the hardware's best), "scalar", "avx2" or "avx512". False with a
// message in *error on an unknown name or a level the CPU lacks.
bool set_option(const std::string& value, std::string* error);
std::string get_option();  // the active level's name
// Applies ACME_ISA if set (at init); false with a message naming the variable.
bool configure_from_env(std::string* error);

}  // namespace acme::isa
