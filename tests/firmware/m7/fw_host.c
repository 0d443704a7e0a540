// fw_port.h on a hosted C library: the host build of the firmware harness (tests/firmware/qemu_m7.py builds
// fw_main.c with this file for x86-64 and compares its output with the emulated Cortex-M7's).
#include <stdio.h>

#include "fw_port.h"

void fw_puts(const char* s) { fputs(s, stdout); }
size_t fw_stack_used(void) { return 0; }
size_t fw_stack_size(void) { return 0; }
const char* fw_platform(void) { return "host"; }
