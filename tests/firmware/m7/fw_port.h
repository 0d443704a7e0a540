// The platform half of the firmware harness (tests/firmware/m7): where text goes and how the program ends.
// fw_m7.c implements it bare-metal on qemu's mps2-an500 (Cortex-M7, ARM semihosting); fw_host.c on a hosted C
// library (stdout, exit). fw_main.c, the model half, is the same source on both.
#ifndef FW_PORT_H
#define FW_PORT_H

#include <stddef.h>

// Writes a NUL-terminated string (no newline added).
void fw_puts(const char* s);

// Bytes of the stack the program has used so far (the deepest point since reset), or 0 where it is not measured
// (the host).
size_t fw_stack_used(void);

// Bytes reserved for the stack (0 on the host).
size_t fw_stack_size(void);

// The platform's name, printed in the header line ("cortex-m7 (qemu mps2-an500)" or "host").
const char* fw_platform(void);

#endif
