"""The price catalog over REST: anyone signed in reads the prices in force; operators set a pool's price.
Members ask which share to take (recommend) and accept resizes offered to their running work."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from billing_app.api.serializers import (
    PoolPriceSerializer,
    RecommendationSerializer,
    RecommendRequestSerializer,
    ResizeOfferSerializer,
    SetPoolPriceSerializer,
)
from billing_app.choices import ResizeState
from billing_app.models import ResizeOffer
from billing_app.recommendation import recommend_for
from billing_app.resizing import accept_resize, visible_resize_offers
from billing_app.selectors import prices_in_force
from billing_app.services import set_pool_price
from portal.api.permissions import MaySetPrices
from scheduler_app.models import Pool
from teams.selectors import team_for_submit


class PriceListView(APIView):
    """The price in force now of every priced pool, per whole GPU-hour in USD (decimal strings).
    Unpriced pools are left out."""

    @extend_schema(responses=PoolPriceSerializer(many=True), tags=["prices"])
    def get(self, request):
        return Response(PoolPriceSerializer(prices_in_force(), many=True).data)


class PoolPriceView(APIView):
    """Operators price a pool from now (or a later effective_from); earlier prices stay in the history."""

    permission_classes = [MaySetPrices]

    @extend_schema(
        request=SetPoolPriceSerializer,
        responses=PoolPriceSerializer,
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description="The pool's name.")],
        tags=["prices"],
    )
    def put(self, request, name):
        form = SetPoolPriceSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        price = set_pool_price(pool, actor=request.user, **form.validated_data)
        return Response(PoolPriceSerializer(price).data)


class RecommendView(APIView):
    """The time/cost curve of a request shape on one GPU model, on-demand and spot, its Pareto front,
    and the cheapest option that meets the deadline and budget; nothing is submitted."""

    @extend_schema(request=RecommendRequestSerializer, responses=RecommendationSerializer, tags=["prices"])
    def post(self, request):
        form = RecommendRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        team = team_for_submit(request.user, fields.pop("team"))
        pool_name = fields.pop("pool")
        pool = Pool.objects.filter(name=pool_name).first() if pool_name else None
        if pool_name and pool is None:
            raise ValidationError({"pool": f"No pool {pool_name!r}."})
        gpu_model, recommendation = recommend_for(team=team, pool=pool, **fields)
        data = {"gpu_model": gpu_model, **recommendation.__dict__}
        return Response(RecommendationSerializer(data).data)


class ResizeOfferViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Resizes offered to your teams' running work (`?request=<id>`, `?state=offered`); `accept/` opts in:
    the scheduler then applies it at the job's next checkpoint."""

    serializer_class = ResizeOfferSerializer
    queryset = ResizeOffer.objects.none()  # names the model for the schema; get_queryset scopes it
    lookup_value_converter = "int"

    def get_queryset(self):
        offers = visible_resize_offers(self.request.user)
        params = self.request.query_params
        if params.get("request", "").isdigit():
            offers = offers.filter(request_id=int(params["request"]))
        if state := params.get("state"):
            if state not in ResizeState.values:
                raise ValidationError({"state": f"One of: {', '.join(ResizeState.values)}."})
            offers = offers.filter(state=state)
        return offers

    @extend_schema(
        parameters=[
            OpenApiParameter("request", int, description="Only this request's offers."),
            OpenApiParameter("state", str, description="offered, accepted, applied or withdrawn."),
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses=ResizeOfferSerializer)
    @action(detail=True, methods=["post"])
    def accept(self, request, pk=None):
        offer = accept_resize(get_object_or_404(self.get_queryset(), pk=pk), user=request.user)
        return Response(ResizeOfferSerializer(offer).data)
