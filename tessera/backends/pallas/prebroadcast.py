from tessera.ir.graph import KernelIR
def pre_broadcast(ir: KernelIR, lanes: int = 128) -> KernelIR:
    return ir
