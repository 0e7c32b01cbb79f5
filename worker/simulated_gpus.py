"""The simulated GPU inventory (GRADCI_DEVICE_INVENTORY) lives in the engine, which runs simulated
cuda cells on the CPU: ``gradci.scenarios.simulated_gpus``. Re-exported here for the worker's discovery."""
from gradci.scenarios.simulated_gpus import (EXAMPLE, INVENTORY_VARIABLE, InventoryError, inline_inventory,  # noqa: F401
                                      read_simulated_gpus, simulated_gpus)
