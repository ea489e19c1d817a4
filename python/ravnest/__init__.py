"""ravnest: Ravnest's Python API over the ravnest command line (docs/python.md).

    import ravnest
    with ravnest.local(nodes=3):
        ravnest.clusterize(model, example_args=(x,))
        trainer = ravnest.Trainer(node=ravnest.Node(optimizer=torch.optim.Adam,
                                                    optimizer_params={"lr": 1e-3},
                                                    criterion=torch.nn.CrossEntropyLoss()),
                                  train_loader=train_loader, val_loader=val_loader, epochs=2)
        trainer.train()
        state_dict = ravnest.model_fusion(cluster_id=0)
"""

from ._cli import RavnestError
from ._clusterize import clusterize
from ._local import local
from ._seed import set_seed
from ._trainer import Node, Trainer, model_fusion

__all__ = ["RavnestError", "clusterize", "local", "Node", "Trainer", "model_fusion", "set_seed"]
__version__ = "0.1.0"
