// Internal: the layer layout patch 0003 reads while llama.cpp assigns layers to devices.
#pragma once

// -1: upstream's layout (n_gpu_layers offloads the last layers); k >= 0: layers [0, k) on the
// first GPU, the rest on the CPU.
int specee_first_gpu_layers();
bool specee_output_on_gpu();
