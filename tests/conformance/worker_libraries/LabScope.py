"""A library that a glob route (`name = "Lab*"`) serves by its imported name."""


class LabScope:
    def library_name(self):
        """The name of the module this instance comes from."""
        return "LabScope"
